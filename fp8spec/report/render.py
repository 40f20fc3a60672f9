"""The report as text (a per-step table, the run against its plan, the verdicts) and as one JSON document."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Optional

from fp8spec.report.phases import rollout_part, steady_tokens_per_s, step_budget
from fp8spec.report.steps import COLUMNS, Row, whole_syncs
from fp8spec.report.verdicts import Context, Finding


@dataclass
class Report:
    run_name: str
    ctx: Context
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return f"{value[0]:.3g}-{value[1]:.3g}"
    if isinstance(value, int):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def table_text(rows: list[Row]) -> list[str]:
    shown = [(a, h) for a, h in COLUMNS if a == "step" or any(getattr(r, a) is not None for r in rows)]
    cells = [[h for _, h in shown]] + [[_cell(getattr(r, a)) for a, _ in shown] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(shown))]
    return ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]


def comparison(ctx: Context) -> dict[str, Any]:
    """The run's figures beside what the plan predicted, where both exist."""
    out: dict[str, Any] = {}
    kv = ctx.run.of("kv_cache_size")
    measured = kv[0].groups["tokens"] if kv else None
    planned = ctx.plan.kv_cache_tokens if ctx.plan else None
    out["kv_cache_tokens"] = {
        "measured": measured,
        "where": str(kv[0].loc) if kv else None,
        "planned": planned,
        "ratio": round(measured / planned, 4) if measured and planned else None,
    }
    syncs = [r.sync_s for r in ctx.rows if r.sync_s is not None]
    patch = [r.patch_sync_s for r in ctx.rows if r.patch_sync_s is not None]
    whole = [t for _, t, _ in whole_syncs(ctx.run, ctx.rows)]
    planned_sync = ctx.plan.sync_s if ctx.plan else None
    measured_whole = statistics.median(whole) if whole else None
    out["weight_sync_s"] = {
        "median": round(statistics.median(syncs), 4) if syncs else None,
        "patch_median": round(statistics.median(patch), 4) if patch else None,
        "whole_median": round(measured_whole, 4) if measured_whole is not None else None,
        "planned": round(planned_sync, 4) if planned_sync is not None else None,
        "planned_path": ctx.plan.sync_path if ctx.plan else None,
        "planned_why": ctx.plan.sync_why if ctx.plan else None,
        "ratio": round(measured_whole / planned_sync, 4) if measured_whole and planned_sync else None,
    }
    steps, tok = steady_tokens_per_s(ctx.rows)
    _, base = steady_tokens_per_s(ctx.baseline or [])
    out["generation_tokens_per_s"] = {
        "steps": steps,
        "mean": round(statistics.mean(tok), 1) if tok else None,
        "baseline_mean": round(statistics.mean(base), 1) if base else None,
        "speed_up": round(statistics.mean(tok) / statistics.mean(base) - 1, 4) if tok and base else None,
        "expected_speed_up": [ctx.plan.gain_low, ctx.plan.gain_high] if ctx.plan else None,
    }
    gain = (ctx.plan.gain_low, ctx.plan.gain_high) if ctx.plan else None
    budget = step_budget(ctx.rows, gain, ctx.baseline)
    out["step"] = (
        None
        if budget is None
        else {
            "steps": budget.steps,
            "mean_s": round(budget.step_s, 3),
            "shares": {k: round(v, 4) for k, v in budget.shares.items()},
            "expected_saving": [round(v, 4) for v in budget.expected_saving]
            if budget.expected_saving
            else None,
            "baseline_step_speed_up": _round(budget.baseline_step_speed_up),
            "baseline_generation_share": _round(budget.baseline_gen_share),
            "baseline_steps": budget.baseline_steps,
            "baseline_phases": {k: [round(a, 3), round(b, 3)] for k, (a, b) in budget.baseline_phases.items()}
            if budget.baseline_phases
            else None,
            "rollout_part_s": round(rollout_part(budget.baseline_phases), 3)
            if budget.baseline_phases
            else None,
            "trainer_fp8": ctx.plan.trainer_fp8 if ctx.plan else None,
        }
    )
    return out


def _round(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 4)


def _share(v: float) -> str:
    return f"{v:.0%}" if v >= 0.01 or v == 0 else f"{v:.1%}"


def _step_line(st: Optional[dict[str, Any]], expected: str, caveat: str = "") -> str:
    """Where the step's time goes and what the rollout's FP8 gain buys in it (fp8spec/report/phases.py)."""
    if st is None:
        return "no step with both a step time and a generation time"
    shares = st["shares"]
    steps = st["steps"]
    over = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    parts = [f"{label} {_share(v)}" for label, v in shares.items() if v > 0 and label != "generation"]
    line = f"generation {_share(shares['generation'])} of the step ({over}, mean {_cell(st['mean_s'])} s)" + (
        f"; {', '.join(parts)}" if parts else ""
    )
    low_high = st["expected_saving"]
    if low_high:
        saved = f"{low_high[0]:.1%}" if low_high[0] == low_high[1] else f"{low_high[0]:.1%}-{low_high[1]:.1%}"
        line += f"; the expected {expected} rollout gain saves {saved} of a BF16-rollout step"
        if caveat:  # the plan's own doubt about that gain, where its BF16 engine already holds the step
            line += f", if it held ({caveat})"
    if st["baseline_step_speed_up"] is not None:
        faster = st["baseline_step_speed_up"]
        line += (
            f"; measured: the baseline's step takes {faster:+.1%} against this run's"
            f" (its generation {_share(st['baseline_generation_share'] or 0.0)} of its step)"
        )
    return line


def _steps(steps: list[int]) -> str:
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"


def _baseline_line(st: Optional[dict[str, Any]]) -> Optional[str]:
    """Phase by phase against the baseline: where this run's step time was won or lost, and how much of it FP8 in
    the rollout can account for (fp8spec/report/phases.py)."""
    if st is None or not st["baseline_phases"]:
        return None
    ph = st["baseline_phases"]
    base_step, run_step = ph["step"]
    parts = [
        f"{label} {_cell(a)} -> {_cell(b)} s ({b - a:+.2f})"
        for label, (a, b) in ph.items()
        if label != "step" and (a or b)
    ]
    over = (
        _steps(st["steps"])
        if st["steps"] == st["baseline_steps"]
        else f"{_steps(st['baseline_steps'])} / {_steps(st['steps'])}"
    )
    line = (
        f"against the baseline ({over}): step {_cell(base_step)} -> {_cell(run_step)} s "
        f"({run_step / base_step - 1:+.1%}); {', '.join(parts)}"
    )
    if st["trainer_fp8"] is None:
        return line
    part = st["rollout_part_s"]
    line += f"; generation and weight sync, the phases FP8 in the rollout changes: {part:+.2f} s ({part / base_step:+.1%})"
    rest = (run_step - base_step) - part
    if not st["trainer_fp8"]:
        line += (
            f"; the other {rest:+.2f} s is in phases this spec's BF16 trainer runs alike in both runs: run-to-run "
            "variation, not FP8"
        )
    else:
        line += f"; the other {rest:+.2f} s includes the FP8 trainer's"
    return line


def _pct(low: Optional[float], high: Optional[float]) -> str:
    if low is None or high is None:
        return "not measured for this engine and model"
    return f"+{low:.0%}" if low == high else f"+{low:.0%} to +{high:.0%}"


def _sync_against_plan(ws: dict[str, Any]) -> str:
    if ws["planned_path"] is None:
        return "no plan (--spec SPEC)"
    if ws["planned"] is None:
        return f"fp8spec plan has no sync time for the spec ({ws['planned_path']}: {ws['planned_why']})"
    planned = f"{_cell(ws['planned'])} s planned ({ws['planned_path']})"
    if ws["whole_median"] is None:
        return (
            f"{planned}; no whole-sync line from step 2 on to compare "
            "(the sync_timing patch's sent line, the direct path's engine line)"
        )
    return f"{_cell(ws['whole_median'])} s whole sync from step 2 on, {planned}, {ws['ratio']:.2f}x"


def render_text(rep: Report) -> str:
    ctx, run = rep.ctx, rep.ctx.run
    of = f" of {run.total}" if run.total else ""
    state = f"finished {run.last_step}{of} steps" if run.finished else f"{run.last_step}{of} steps logged"
    lines = [f"fp8spec report: {rep.run_name} ({len(run.sources)} log file(s), {state})"]
    if ctx.bundle:
        b = ctx.bundle
        lines.append(
            f"bundle: {b.where} (patches {', '.join(b.patches) or 'none'}; weight sync {b.sync_path})"
        )
    if ctx.plan:
        lines.append(f"plan: {ctx.plan.spec} ({ctx.plan.choice})")
        lines += [f"  note: {n}" for n in ctx.plan.notes]
    lines.append("")
    lines += table_text(ctx.rows) if ctx.rows else ["(no step line in the logs read)"]
    c = comparison(ctx)
    lines += ["", "against the plan:"]
    kv = c["kv_cache_tokens"]
    measured = (
        f"{kv['measured']:,} tokens ({kv['where']})"
        if kv["measured"]
        else "not in the logs (the engine logs it at INFO, a WARN logging level hides it)"
    )
    planned = f"{kv['planned']:,} planned" if kv["planned"] else "no plan (--spec SPEC)"
    ratio = f", {kv['ratio']:.1%} of plan" if kv["ratio"] else ""
    lines.append(f"  KV cache: {measured}; {planned}{ratio}")
    ws = c["weight_sync_s"]
    lines.append(
        f"  weight sync: median {_cell(ws['median'])} s (verl), {_cell(ws['patch_median'])} s (patch set's line); "
        + _sync_against_plan(ws)
    )
    g = c["generation_tokens_per_s"]
    expected = _pct(ctx.plan.gain_low, ctx.plan.gain_high) if ctx.plan else ""
    speed = f", {g['speed_up']:+.0%} over the baseline" if g["speed_up"] is not None else ""
    judged = expected and f"; expected {expected} over BF16" + (
        "" if g["baseline_mean"] else " (--baseline RUN judges it)"
    )
    over = f" ({_steps(g['steps'])})" if g["steps"] else ""
    lines.append(f"  generation: {_cell(g['mean'])} tok/s{over}{speed}{judged or ''}")
    caveat = ctx.plan.gain_caveat if ctx.plan else ""
    lines.append(f"  step: {_step_line(c['step'], expected, caveat)}")
    if against := _baseline_line(c["step"]):
        lines.append(f"  {against}")
    lines.append("")
    for f in rep.findings:
        lines.append(f"{f.where}: {f.severity} {f.code} {f.message}")  # as fp8spec validate prints findings
        lines.append(f"    hint: {f.hint}")
    warnings = len(rep.findings) - len(rep.errors)
    lines.append(f"{rep.run_name}: {len(rep.errors)} error(s), {warnings} warning(s)")
    return "\n".join(lines) + "\n"


def report_data(rep: Report, files: list[str]) -> dict[str, Any]:
    ctx, run = rep.ctx, rep.ctx.run
    return {
        "run": rep.run_name,
        "sources": run.sources,
        "state": {
            "finished": run.finished,
            "last_step": run.last_step,
            "total_steps": run.total,
        },
        "bundle": asdict(ctx.bundle) if ctx.bundle else None,
        "plan": asdict(ctx.plan) if ctx.plan else None,
        "steps": [asdict(r) for r in ctx.rows],
        "comparison": comparison(ctx),
        "verdicts": [asdict(f) for f in rep.findings],
        "summary": {"errors": len(rep.errors), "warnings": len(rep.findings) - len(rep.errors)},
        "files": files,
    }


def render_json(rep: Report, files: list[str]) -> str:
    return json.dumps(_plain(report_data(rep, files)), indent=2, sort_keys=True, allow_nan=False)


def _plain(value: Any) -> Any:
    """JSON has no NaN or infinity: a metric verl logged as nan stays visible as the string "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
