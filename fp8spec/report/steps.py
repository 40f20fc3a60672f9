"""The per-step table: verl's timings and rollout-correction metrics, with the patch set's own sync time and
KV-scale range beside them.

A sync line of the patch set belongs to the step whose update ran it: the first sync fills the engine before
step 1, sync k + 1 follows step k's update. The k-th KV-scale line is the calibration of step k.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from fp8spec.report.logs import Run
from fp8spec.report.names import names

_RANGE = re.compile(r"\b([kqv]) \[([0-9.eE+-]+), ([0-9.eE+-]+)\]")
_SYNC_KINDS = ("sync_sent", "fbq_received", "fbq_trainer")


@dataclass(frozen=True)
class Row:
    step: int
    where: str
    gen_s: Optional[float]
    tokens_per_s: Optional[float]
    old_log_prob_s: Optional[float]
    ref_s: Optional[float]
    update_s: Optional[float]
    sync_s: Optional[float]  # verl's timing_s/update_weights
    patch_sync_s: Optional[float]  # the patch set's own line for the same sync
    step_s: Optional[float]
    response_mean: Optional[float]
    response_max: Optional[float]
    mismatch_kl: Optional[float]
    is_mean: Optional[float]
    clip_fraction: Optional[float]
    kv_scale_range: Optional[tuple[float, float]]  # over q, k and v of every layer
    preempted: Optional[float]
    rollout_corr: dict[str, float]


COLUMNS = (
    ("step", "step"),
    ("gen_s", "gen s"),
    ("tokens_per_s", "tok/s"),
    ("old_log_prob_s", "logprob s"),
    ("ref_s", "ref s"),
    ("update_s", "update s"),
    ("sync_s", "sync s"),
    ("patch_sync_s", "patch sync s"),
    ("step_s", "step s"),
    ("response_mean", "resp mean"),
    ("response_max", "resp max"),
    ("mismatch_kl", "mismatch KL"),
    ("is_mean", "IS mean"),
    ("clip_fraction", "TIS clip"),
    ("kv_scale_range", "KV scales"),
    ("preempted", "preempt/req"),
)


def step_rows(run: Run) -> list[Row]:
    n = names().metrics
    prefix = names().rollout_corr_prefix
    syncs = per_sync_seconds(run)
    scales = [scale_range(e.groups.get("ranges") or "") for e in run.of("kv_applied")]
    rows = []
    for number in sorted(run.steps):
        s = run.steps[number]
        m = s.metrics

        def get(column: str, m: dict[str, float] = m) -> Optional[float]:
            return m.get(n[column])

        ms_per_token = get("gen_ms_per_token")
        rows.append(
            Row(
                step=number,
                where=str(s.loc),
                gen_s=get("timing_gen"),
                tokens_per_s=1000.0 / ms_per_token if ms_per_token else None,
                old_log_prob_s=get("timing_old_log_prob"),
                ref_s=get("timing_ref"),
                update_s=get("timing_update_actor"),
                sync_s=get("timing_update_weights"),
                patch_sync_s=syncs[number] if number < len(syncs) else None,
                step_s=get("timing_step"),
                response_mean=get("response_length_mean"),
                response_max=get("response_length_max"),
                mismatch_kl=get("mismatch_kl"),
                is_mean=get("is_mean"),
                clip_fraction=get("is_clip_fraction"),
                kv_scale_range=scales[number - 1] if 0 < number <= len(scales) else None,
                preempted=get("num_preempted"),
                rollout_corr={k[len(prefix) :]: v for k, v in sorted(m.items()) if k.startswith(prefix)},
            )
        )
    return rows


def per_sync_seconds(run: Run) -> list[float]:
    """The patch set's time of each weight sync, in order (index 0: the sync before step 1). The trainer's
    'sent' line is the whole sync when it is there; otherwise the engine's receive line."""
    for kind in _SYNC_KINDS:
        found = [float(e.groups["seconds"]) for e in run.of(kind)]
        if found:
            return found
    return []


def whole_syncs(run: Run, rows: list[Row]) -> list[tuple[Row, float, str]]:
    """(row, seconds, where) of each whole weight sync from step 2 on, timed from the trainer's first bucket to
    the engine's last: the trainer's 'sent' line (the opt-in sync_timing patch), else the direct path's engine
    line (its receive call waits for every bucket; the slowest engine worker where there are several). verl's
    timing_s/update_weights also counts the offload and the engine's wake-up around the sync, and the other
    paths' engine lines only the engine's part. Empty when the run logs no such line."""
    sent = run.of("sync_sent")
    if sent:
        return [
            (r, float(sent[r.step].groups["seconds"]), str(sent[r.step].loc))
            for r in rows
            if 2 <= r.step < len(sent)
        ]
    engine: dict[int, tuple[float, str]] = {}
    for e in run.of("direct_sync"):
        if e.groups.get("seconds") is not None:
            number, seconds = int(e.groups["sync"]), float(e.groups["seconds"])
            if number not in engine or seconds > engine[number][0]:
                engine[number] = (seconds, str(e.loc))
    return [(r, *engine[r.step + 1]) for r in rows if r.step >= 2 and r.step + 1 in engine]


def scale_range(text: str) -> Optional[tuple[float, float]]:
    values = [float(v) for m in _RANGE.finditer(text) for v in (m.group(2), m.group(3))]
    return (min(values), max(values)) if values else None
