"""Is the FP8 rollout's mismatch with the trainer under control: the mismatch KL's trend and level, the IS
weights' mean, the TIS clip fraction. The numbers and their sources: fp8spec/data/report_thresholds.yaml."""

from __future__ import annotations

from typing import Iterable

from fp8spec.report.names import thresholds
from fp8spec.report.verdicts.unit import Context, verdict

Found = Iterable[tuple[str, str]]


@verdict(
    "RPT010",
    "mismatch-kl-rising",
    "warning",
    "The rollout/trainer mismatch KL rose over a window of steps.",
    """The FP8-RL paper shows rollout-only FP8 runs whose mismatch KL (verl's rollout_corr/kl) kept rising until
    it soared above 5 and training collapsed (about step 700), while runs with TIS, or with FP8 in the trainer
    too, stayed flat. A KL that rises every step, doubles over the window and reaches a floor is that trend, long
    before the collapse (below the floor the ratio of tiny values is noise). Window, factor and floor:
    fp8spec/data/report_thresholds.yaml (mismatch_kl).""",
    "check that the correction is on (correction.method tis, verl's rollout_corr metrics present), that the "
    "KV scales follow the policy (RPT003); consider FP8 in the trainer as well, or a BF16 router for MoE",
    example=(
        "the real 4B run with its mismatch KL scaled by 3 per step",
        "mismatch KL rose every step from 0.2028 (step 1) to 1.811 (step 3)",
        "the real 4B run; the real tiny MoE run, whose KL rises x18 below the floor",
    ),
)
def kl_rising(ctx: Context) -> Found:
    t = thresholds()["mismatch_kl"]
    window, factor, floor = int(t["window"]), float(t["rise_factor"]), float(t["floor"])
    kl = [(r, r.mismatch_kl) for r in ctx.rows if r.mismatch_kl is not None]
    for i in range(len(kl) - window + 1):
        part = kl[i : i + window]
        values = [v for _, v in part]
        rising = all(b > a for a, b in zip(values, values[1:]))
        if rising and values[0] > 0 and values[-1] >= max(factor * values[0], floor):
            first, last = part[0][0], part[-1][0]
            yield (
                last.where,
                (
                    f"mismatch KL rose every step from {values[0]:.4g} (step {first.step}) to {values[-1]:.4g} "
                    f"(step {last.step}): x{values[-1] / values[0]:.1f} over {window} steps (limit x{factor:g})"
                ),
            )
            return


@verdict(
    "RPT011",
    "is-mean-drift",
    "warning",
    "The mean token importance weight drifted away from 1.",
    """Under the rollout policy the importance weight pi_train / pi_rollout has expectation 1 (verl's
    rollout_corr/rollout_is_mean is logged before any normalization). A mean far from 1 means the two policies
    differ systematically, not by rounding noise: wrong KV scales, weights not synced, or a quantization bug.
    Limit: fp8spec/data/report_thresholds.yaml (is_mean).""",
    "compare the step's sync line and KV-scale line with the one before; run the bundle's BF16 twin to see "
    "whether the drift is FP8's",
    example=(
        "the real tiny FSDP + vLLM run with step 4's IS mean set to 1.25",
        "step 4: IS mean 1.25, 0.25 from 1 (limit 0.1)",
        "the real tiny FSDP + vLLM run",
    ),
)
def is_mean_drift(ctx: Context) -> Found:
    limit = float(thresholds()["is_mean"]["max_drift"])
    for r in ctx.rows:
        if r.is_mean is not None and abs(r.is_mean - 1.0) > limit:
            yield (
                r.where,
                f"step {r.step}: IS mean {r.is_mean:.4g}, {abs(r.is_mean - 1):.3g} from 1 (limit {limit:g})",
            )


@verdict(
    "RPT012",
    "tis-clip-high",
    "warning",
    "Truncated importance sampling clips a large fraction of the tokens.",
    """TIS caps each token's importance weight at C (2 in the paper and verl's preset); the clipped tokens'
    gradients are biased. The paper's FP8 runs matched BF16 with C=2; when a large share of tokens hits the cap
    the correction is no longer small and the run is off-policy in ways TIS does not fix. Limit and sources:
    fp8spec/data/report_thresholds.yaml (clip_fraction).""",
    "look at the mismatch KL (RPT010) and the KV scales (RPT003); a larger C hides the symptom, it does not fix "
    "the mismatch",
    example=(
        "the real 4B run with its clip fractions times 10",
        "step 1: 19.4% of tokens clipped (limit 10%)",
        "the real 4B run (1.7-2.0 % clipped)",
    ),
)
def clip_high(ctx: Context) -> Found:
    limit = float(thresholds()["clip_fraction"]["max"])
    for r in ctx.rows:
        if r.clip_fraction is not None and r.clip_fraction > limit:
            yield r.where, f"step {r.step}: {r.clip_fraction:.1%} of tokens clipped (limit {limit:.0%})"


@verdict(
    "RPT013",
    "mismatch-kl-collapse",
    "error",
    "The mismatch KL reached the level at which the paper's FP8 run collapsed.",
    """The FP8-RL paper's rollout-only FP8 run collapsed when its mismatch KL soared above 5; at that level the
    rollout samples no longer come from the policy being trained, and TIS cannot correct it.
    fp8spec/data/report_thresholds.yaml (mismatch_kl.ceiling).""",
    "stop and resume from an earlier checkpoint with FP8 training end to end, or a BF16 rollout",
    example=(
        "the real tiny FSDP + vLLM run with step 5's mismatch KL set to 6",
        "step 5: mismatch KL 6 is above 5",
        "the real tiny FSDP + vLLM run",
    ),
)
def kl_collapse(ctx: Context) -> Found:
    ceiling = float(thresholds()["mismatch_kl"]["ceiling"])
    for r in ctx.rows:
        if r.mismatch_kl is not None and r.mismatch_kl > ceiling:
            yield r.where, f"step {r.step}: mismatch KL {r.mismatch_kl:.4g} is above {ceiling:g}"
            return
