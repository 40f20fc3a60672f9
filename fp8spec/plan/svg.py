"""The plan's picture as SVG text, drawn without matplotlib so compiled bundles stay byte-identical on every
machine (same data as fp8spec.plan.figure: KV capacity, and max concurrency against response length)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from fp8spec.plan.plan import DOES_NOT_FIT, curves, response_ticks

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan

COLOURS = ("#555555", "#1f77b4", "#d62728", "#2ca02c")
W, H = 900, 340
LEFT = (60, 40, 300, 240)  # x, y, width, height of each panel
RIGHT = (470, 40, 400, 240)


def _f(x: float) -> str:
    return f"{x:.1f}"


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "middle", extra: str = "") -> str:
    return (
        f'<text x="{_f(x)}" y="{_f(y)}" font-size="{size}" text-anchor="{anchor}"{extra}>{escape(s)}</text>'
    )


def _nice_top(v: float) -> float:
    if v <= 0:
        return 1.0
    step = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * step:
            return m * step
    return 10 * step


def plan_svg(plan: MemoryPlan) -> str:
    series, running = curves(plan)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="DejaVu Sans, Arial, sans-serif">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
    ]
    x0, y0, pw, ph = LEFT
    top = _nice_top(max(c.capacity_tokens for c in series) / 1e3)
    out.append(_text(x0 + pw / 2, 24, f"{plan.spec.model.name}: KV cache capacity per replica", 12))
    out.append(f'<path d="M{x0} {y0} V{y0 + ph} H{x0 + pw}" stroke="black" fill="none"/>')
    for i in range(5):
        v = top * i / 4
        y = y0 + ph - ph * i / 4
        out.append(_text(x0 - 6, y + 4, f"{v:.0f}", 10, "end"))
    out.append(
        _text(18, y0 + ph / 2, "thousand tokens", 10, extra=f' transform="rotate(-90 18 {_f(y0 + ph / 2)})"')
    )
    slot = pw / len(series)
    for i, (colour, c) in enumerate(zip(COLOURS, series)):
        h = ph * (c.capacity_tokens / 1e3) / top
        x = x0 + slot * i + slot * 0.2
        out.append(
            f'<rect x="{_f(x)}" y="{_f(y0 + ph - h)}" width="{_f(slot * 0.6)}" height="{_f(h)}" '
            f'fill="{colour}"/>'
        )
        if c.capacity_tokens > 0:
            out.append(_text(x + slot * 0.3, y0 + ph - h - 4, f"{c.capacity_tokens}", 9))
        else:  # an empty bar reads as missing data without a word: vLLM would refuse to start
            out.append(_text(x + slot * 0.3, y0 + ph - 6, DOES_NOT_FIT, 9, extra=' fill="#d62728"'))
        out.append(_text(x + slot * 0.3, y0 + ph + 16, c.label + (" *" if c.is_spec else ""), 9))
    x0, y0, pw, ph = RIGHT
    xs = [p[0] for c in series for p in c.points]
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    ymax = _nice_top(max([running] + [p[1] for c in series for p in c.points]))
    px = lambda n: x0 + pw * (math.log2(n) - lo) / max(hi - lo, 1e-9)  # noqa: E731
    py = lambda v: y0 + ph - ph * v / ymax  # noqa: E731
    out.append(_text(x0 + pw / 2, 24, "max concurrency vs response length (* = spec)", 12))
    out.append(f'<path d="M{x0} {y0} V{y0 + ph} H{x0 + pw}" stroke="black" fill="none"/>')
    for i in range(5):
        v = ymax * i / 4
        out.append(_text(x0 - 6, py(v) + 4, f"{v:.0f}", 10, "end"))
    for n, label in response_ticks([p[0] for p in series[0].points]):
        out.append(_text(px(n), y0 + ph + 14, label, 8))
    out.append(
        _text(
            x0 + pw / 2,
            y0 + ph + 30,
            f"response length (tokens; prompt {plan.spec.rollout.max_prompt_length})",
            10,
        )
    )
    out.append(
        f'<line x1="{x0}" y1="{_f(py(running))}" x2="{x0 + pw}" y2="{_f(py(running))}" stroke="black" '
        'stroke-dasharray="5,4"/>'
    )
    out.append(_text(x0 + pw - 4, py(running) - 4, f"running sequences ({running})", 9, "end"))
    for i, (colour, c) in enumerate(zip(COLOURS, series)):
        pts = " ".join(f"{_f(px(n))},{_f(py(v))}" for n, v in c.points)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<rect x="{x0 + 8}" y="{y0 + 8 + 14 * i}" width="10" height="10" fill="{colour}"/>')
        out.append(_text(x0 + 22, y0 + 17 + 14 * i, c.label + (" *" if c.is_spec else ""), 9, "start"))
    out.append("</svg>")
    return "\n".join(out) + "\n"
