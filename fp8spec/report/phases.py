"""Where a step's time goes, and what the rollout's FP8 gain can buy in it.

FP8 in the rollout shortens only the generation phase: a step whose log-prob and update passes take most of the
time gains little however fast the engine gets (Amdahl). The split is taken from steps 2 on when the run has
them: step 1 also starts the engine's graphs and builds the first sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fp8spec.report.steps import Row

# (Row attribute, label); 'other' is the rest of the step's time (reward, advantages, data, sleep and wake-up).
PHASES = (
    ("gen_s", "generation"),
    ("old_log_prob_s", "old log-prob"),
    ("ref_s", "reference"),
    ("update_s", "update"),
    ("sync_s", "weight sync"),
)
OTHER = "other"


def split(r: Row) -> list[tuple[str, float]]:
    """The step's seconds per phase, 'other' last (never negative: verl's phases can overlap by rounding)."""
    parts = [(label, getattr(r, attr) or 0.0) for attr, label in PHASES]
    rest = (r.step_s or 0.0) - sum(v for _, v in parts)
    return parts + [(OTHER, max(rest, 0.0))]


def steady(rows: list[Row]) -> list[Row]:
    """The steps whose split counts: from step 2 on, or the only step a one-step run has; only steps with both
    a step time and a generation time."""
    timed = [r for r in rows if r.step_s and r.gen_s is not None]
    later = [r for r in timed if r.step > 1]
    return later or timed


def steady_tokens_per_s(rows: list[Row]) -> tuple[list[int], list[float]]:
    """Generation throughput of the steady steps (as ``steady``; step 1 also compiles the engine's first-use
    kernels): the steps and their tokens/s."""
    counted = [r for r in steady(rows) if r.tokens_per_s]
    if not counted:  # a run whose steps carry throughput but no step time
        counted = [r for r in rows if r.tokens_per_s]
    return [r.step for r in counted], [r.tokens_per_s or 0.0 for r in counted]


def phase_means(rows: list[Row]) -> dict[str, float]:
    """Mean seconds per phase ('step' included) over the steady steps."""
    counted = steady(rows)
    out = {"step": sum(r.step_s or 0.0 for r in counted) / len(counted)} if counted else {}
    for r in counted:
        for label, v in split(r):
            out[label] = out.get(label, 0.0) + v / len(counted)
    return out


@dataclass(frozen=True)
class StepBudget:
    steps: list[int]  # the steps the shares are taken over
    step_s: float  # mean step time over them
    shares: dict[str, float]  # phase label -> its seconds over those steps / their step seconds
    # what the expected rollout gain (plan) saves of a step whose rollout runs BF16: low and high end
    expected_saving: Optional[tuple[float, float]] = None
    # measured against a baseline run: its mean step over this run's, minus 1 (0.1 = this run 10 % faster)
    baseline_step_speed_up: Optional[float] = None
    baseline_gen_share: Optional[float] = None
    baseline_steps: Optional[list[int]] = None
    # phase label ('step' first) -> (the baseline's mean seconds, this run's), each over its steady steps
    baseline_phases: Optional[dict[str, tuple[float, float]]] = None


def saving(gen_share: float, gain: float) -> float:
    """The share of a BF16-rollout step that a rollout ``gain`` times faster saves, given the FP8 step's
    generation share: the BF16 step spends gen x (1 + gain) where the FP8 step spends gen."""
    extra = gen_share * gain
    return extra / (1.0 + extra)


def step_budget(
    rows: list[Row],
    gain: Optional[tuple[Optional[float], Optional[float]]] = None,
    baseline: Optional[list[Row]] = None,
) -> Optional[StepBudget]:
    counted = steady(rows)
    if not counted:
        return None
    total = sum(r.step_s or 0.0 for r in counted)
    if total <= 0:
        return None
    seconds: dict[str, float] = {}
    for r in counted:
        for label, v in split(r):
            seconds[label] = seconds.get(label, 0.0) + v
    shares = {label: v / total for label, v in seconds.items()}
    expected = None
    if gain is not None and gain[0] is not None and gain[1] is not None:
        expected = (saving(shares["generation"], gain[0]), saving(shares["generation"], gain[1]))
    base_speed = base_gen = base_steps = phases = None
    base_rows = steady(baseline or [])
    base_total = sum(r.step_s or 0.0 for r in base_rows)
    if base_total > 0:
        base_speed = (base_total / len(base_rows)) / (total / len(counted)) - 1.0
        base_gen = sum(r.gen_s or 0.0 for r in base_rows) / base_total
        base_steps = [r.step for r in base_rows]
        ours, theirs = phase_means(counted), phase_means(base_rows)
        phases = {label: (theirs[label], ours[label]) for label in ours}
    return StepBudget(
        [r.step for r in counted],
        total / len(counted),
        shares,
        expected,
        base_speed,
        base_gen,
        base_steps,
        phases,
    )


# The phases FP8 in the rollout can change: the engine's generation and the weight sync (the trainer's FP8 copy
# of its weights). With a BF16 trainer the log-prob and update passes do the same work as a BF16 run's.
ROLLOUT_PHASES = ("generation", "weight sync")


def rollout_part(phases: dict[str, tuple[float, float]]) -> float:
    """Seconds the rollout's phases changed by, this run against the baseline (negative: this run faster)."""
    return sum(phases[label][1] - phases[label][0] for label in ROLLOUT_PHASES if label in phases)
