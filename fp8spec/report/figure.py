"""The report's pictures: each step's phases as stacked bars and the mismatch KL over the steps; with a baseline,
two more bars: the baseline's and this run's mean step over their steady steps, split the same way; for several
runs (one spec's variants), one such mean-step bar each. SVG is written
as plain text (no plotting library, the same bytes for the same run); PNG needs matplotlib (the plot extra)."""

from __future__ import annotations

from typing import Optional
from xml.sax.saxutils import escape

from fp8spec.report.phases import OTHER, phase_means, split
from fp8spec.report.steps import Row

COLOURS = {
    "generation": "#d62728",
    "old log-prob": "#1f77b4",
    "reference": "#bcbd22",
    "update": "#ff7f0e",
    "weight sync": "#9467bd",
    OTHER: "#c7c7c7",
}
W, H, LEFT, TOP, PANEL = 720, 520, 70, 40, 180


def _phases(r: Row) -> list[tuple[str, str, float]]:
    """Stacked from the bottom in the order of PHASES, 'other' on top."""
    return [(label, COLOURS[label], v) for label, v in split(r)]


Column = tuple[str, str, list[tuple[str, str, float]]]  # x label, tooltip prefix, stacked phases


def _columns(rows: list[Row], baseline: Optional[list[Row]]) -> list[Optional[Column]]:
    """One bar per step; with a baseline, a gap (None) and the two runs' mean steps over their steady steps."""
    out: list[Optional[Column]] = [(str(r.step), f"step {r.step}", _phases(r)) for r in rows]
    if baseline:
        means = [(name, phase_means(rs)) for name, rs in (("baseline", baseline), ("this run", rows))]
        if all(m for _, m in means):
            out.append(None)
            for name, m in means:
                out.append(
                    (name, f"{name}, mean step", [(lb, COLOURS[lb], m[lb]) for lb, _ in split(rows[0])])
                )
    return out


def _legend(rows: list[Row]) -> list[tuple[str, str]]:
    """The phases some step spent time in (a run without a reference policy has no reference bar)."""
    return [(label, colour) for label, colour, _ in _phases(rows[0]) if any(_value(r, label) for r in rows)]


def _value(r: Row, label: str) -> float:
    return next(v for lb, _, v in _phases(r) if lb == label)


def _ticks(top: float) -> list[float]:
    if top <= 0:
        return [0.0]
    step = 10 ** len(str(int(top))) / 10 if top >= 1 else 0.1
    while top / step > 6:
        step *= 2
    while top / step < 3:
        step /= 2
    return [i * step for i in range(int(top / step) + 1)]


def report_svg(rows: list[Row], title: str, baseline: Optional[list[Row]] = None) -> str:
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2:.0f}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    out += _bars(rows, _columns(rows, baseline), TOP + 10)
    out += _kl(rows, TOP + PANEL + 90)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def variants_svg(runs: list[tuple[str, list[Row]]], title: str) -> str:
    """One bar per run: its mean step over its steady steps, split by phase (runs of one spec's variants side by
    side). The bar's labels carry each phase's seconds."""
    columns: list[Optional[Column]] = []
    for name, rows in runs:
        m = phase_means(rows)
        if m:
            label = f"{name} ({m['step']:.1f} s)"
            columns.append(
                (label, f"{name}, mean step", [(lb, COLOURS[lb], m[lb]) for lb, _ in split(rows[0])])
            )
    height = TOP + PANEL + 50
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{height}" fill="white"/>',
        f'<text x="{W / 2:.0f}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    out += _bars([r for _, rows in runs for r in rows], columns, TOP + 10)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axis(y0: float, top: float, label: str) -> list[str]:
    out = [
        f'<text x="12" y="{y0 + PANEL / 2:.0f}" transform="rotate(-90 12 {y0 + PANEL / 2:.0f})" '
        f'text-anchor="middle">{escape(label)}</text>'
    ]
    for t in _ticks(top):
        y = y0 + PANEL - (t / top * PANEL if top else 0)
        out.append(f'<line x1="{LEFT}" x2="{W - 150}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{t:.3g}</text>')
    return out


def _bars(rows: list[Row], columns: list[Optional[Column]], y0: float) -> list[str]:
    top = max((sum(v for _, _, v in c[2]) for c in columns if c), default=0.0) * 1.05
    out = _axis(y0, top, "seconds per step")
    span = (W - 150 - LEFT) / max(len(columns), 1)
    for i, c in enumerate(columns):
        if c is None:
            continue
        name, tip, phases = c
        x, base = LEFT + i * span + span * 0.15, y0 + PANEL
        for label, colour, v in phases:
            h = v / top * PANEL if top else 0
            base -= h
            out.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{span * 0.7:.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{escape(tip)} {escape(label)}: {v:.3g} s</title></rect>"
            )
        out.append(
            f'<text x="{x + span * 0.35:.1f}" y="{y0 + PANEL + 14:.1f}" text-anchor="middle">{escape(name)}</text>'
        )
    for k, (label, colour) in enumerate(_legend(rows) if rows else []):
        y = y0 + 10 + k * 16
        out.append(f'<rect x="{W - 140}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{W - 125}" y="{y}">{escape(label)}</text>')
    return out


def _kl(rows: list[Row], y0: float) -> list[str]:
    points = [(r.step, r.mismatch_kl) for r in rows if r.mismatch_kl is not None]
    top = max((v for _, v in points), default=0.0) * 1.1
    out = _axis(y0, top, "mismatch KL")
    if not points:
        out.append(
            f'<text x="{W / 2:.0f}" y="{y0 + PANEL / 2:.0f}" text-anchor="middle">no rollout_corr/kl logged</text>'
        )
        return out
    span = (W - 150 - LEFT) / max(len(rows), 1)
    index = {r.step: i for i, r in enumerate(rows)}

    def xy(step: int, v: float) -> str:
        return (
            f"{LEFT + index[step] * span + span / 2:.1f},{y0 + PANEL - (v / top * PANEL if top else 0):.1f}"
        )

    out.append(
        f'<polyline fill="none" stroke="#d62728" stroke-width="2" points="{" ".join(xy(s, v) for s, v in points)}"/>'
    )
    for s, v in points:
        x, y = xy(s, v).split(",")
        out.append(
            f'<circle cx="{x}" cy="{y}" r="3" fill="#d62728"><title>step {s}: {v:.4g}</title></circle>'
        )
        out.append(f'<text x="{x}" y="{y0 + PANEL + 14:.1f}" text-anchor="middle">{s}</text>')
    out.append(
        f'<text x="{(W - 150 + LEFT) / 2:.0f}" y="{y0 + PANEL + 30:.1f}" text-anchor="middle">step</text>'
    )
    return out


def report_png(rows: list[Row], title: str, baseline: Optional[list[Row]] = None) -> Optional[bytes]:
    """The same two panels as PNG bytes; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    import io

    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), dpi=100)
    steps = [r.step for r in rows]
    columns = _columns(rows, baseline)
    xs = [i for i, c in enumerate(columns) if c]
    bottom = [0.0] * len(xs)
    for label, colour in _legend(rows) if rows else []:
        values = [next(v for lb, _, v in c[2] if lb == label) for c in columns if c]
        a.bar(xs, values, bottom=bottom, color=colour, label=label)
        bottom = [x + y for x, y in zip(bottom, values)]
    a.set_xticks(xs, [c[0] for c in columns if c])
    a.set_ylabel("seconds per step")
    if rows:
        a.legend(fontsize=7, loc="upper right")
    a.set_title(title)
    kl = [(r.step, r.mismatch_kl) for r in rows if r.mismatch_kl is not None]
    b.plot([s for s, _ in kl], [v for _, v in kl], marker="o", color="#d62728")
    b.set_xticks(steps)
    b.set_xlabel("step")
    b.set_ylabel("mismatch KL")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
