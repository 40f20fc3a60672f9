"""The plan's picture as a PNG (matplotlib; imported only when a PNG is asked for).

Byte-identical for identical plans: Agg backend, fixed size and dpi, a fixed 'Software' entry (no matplotlib
version), which also marks the file as fp8spec's plan picture (fp8spec.plan.pictures).
Text from the spec (the model's name) is drawn literally: matplotlib would read `$...$` in it as math.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

# numpy's OpenBLAS reserves buffers per thread when it loads and ends the process (exit 1, no Python error)
# when a memory limit refuses them; one figure needs no threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fp8spec.plan.plan import DOES_NOT_FIT, curves, response_ticks  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from fp8spec.plan.plan import MemoryPlan

COLOURS = ("#555555", "#1f77b4", "#d62728", "#2ca02c")


def literal(text: str) -> str:
    """``text`` as matplotlib draws it literally: every '$' escaped, so no part of it is parsed as mathtext."""
    return text.replace("$", r"\$")


def plan_png(plan: MemoryPlan, software: str) -> bytes:
    """The PNG, carrying ``software`` as its 'Software' entry: the mark fp8spec.plan.pictures recognises its own
    pictures by (it owns the mark, so this module, loaded only with matplotlib, does not import it back)."""
    with plt.rc_context({"svg.hashsalt": "fp8spec", "font.family": "DejaVu Sans"}):
        fig = plan_figure(plan)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": software})
        plt.close(fig)
    return buf.getvalue()


def plan_figure(plan: MemoryPlan) -> Figure:
    """The figure (left: KV capacity bars; right: concurrency curves), laid out; the caller closes it."""
    series, running = curves(plan)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    names = [literal(c.label + (" *" if c.is_spec else "")) for c in series]
    left.bar(range(len(series)), [c.capacity_tokens / 1e3 for c in series], color=COLOURS[: len(series)])
    left.set_xticks(range(len(series)), names, fontsize=8)
    left.set_ylabel("KV capacity per replica (thousand tokens)")
    top = max([c.capacity_tokens / 1e3 for c in series] + [1.0])
    for i, c in enumerate(series):
        if c.capacity_tokens <= 0:  # an empty bar: say why there is nothing to see
            left.text(i, top * 0.02, DOES_NOT_FIT, ha="center", va="bottom", fontsize=8, color="#d62728")
    left.set_title(literal(f"{plan.spec.model.name}: KV cache capacity"), fontsize=10)
    for colour, c in zip(COLOURS, series):
        xs = [p[0] for p in c.points]
        ys = [p[1] for p in c.points]
        right.plot(
            xs,
            ys,
            marker="o",
            markersize=3,
            color=colour,
            label=literal(c.label + (" *" if c.is_spec else "")),
        )
    right.axhline(running, color="black", linestyle="--", linewidth=1, label=f"running sequences ({running})")
    right.axvline(plan.spec.rollout.max_response_length, color="grey", linestyle=":", linewidth=1)
    right.set_xscale("log", base=2)
    ticks = response_ticks([p[0] for p in series[0].points])
    right.set_xticks([n for n, _ in ticks], [label for _, label in ticks], fontsize=8)
    right.minorticks_off()
    right.set_xlabel(f"response length (tokens, prompt {plan.spec.rollout.max_prompt_length})")
    right.set_ylabel("sequences that fit in the KV cache")
    right.set_title("max concurrency vs response length (* = spec)", fontsize=10)
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
