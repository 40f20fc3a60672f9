"""Rollout/trainer mismatch correction (TIS and masked variants)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

_MASKED = ("mask", "seq_mask")


@rule(
    "COR001",
    "fp8-rollout-without-correction",
    "error",
    "FP8 rollout with no mismatch correction.",
    """The FP8-RL paper reports a clear accuracy drop when FP8 rollouts train without importance-sampling
    correction, and verl's FP8 guide says the same ("obvious accuracy drop when TIS is not enabled",
    verl docs/low_precision/fp8.md; verl PR #4415). Quantized linears or an FP8 KV cache make the rollout
    policy differ from the trainer's, so the samples are off-policy.""",
    "set correction.method: tis (clip 2.0), or acknowledge COR001 with a reason",
    acknowledgeable=True,
    needs_model=False,
    examples=Examples(
        bad={"correction": {"method": "none"}},
        good={"correction": {"method": "none"}, "linear": {"quantize": False}, "kv_cache": {"dtype": "bf16"}},
        message="correction.method is 'none'",
    ),
)
def fp8_rollout_without_correction(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.fp8_rollout and spec.correction.method == "none":
        what = "quantized linear layers" if spec.linear.quantize else f"an {spec.kv_cache.dtype} KV cache"
        yield Finding(f"the rollout uses {what} but correction.method is 'none'", "correction.method")


@rule(
    "COR002",
    "correction-needs-logprobs",
    "error",
    "A correction method without rollout log-probs.",
    """Every importance-sampling correction divides trainer probabilities by the rollout engine's own
    probabilities, so the engine must return its log-probs: verl's rollout.yaml says TIS "requires rollout
    log probs, set to True" (actor_rollout_ref.rollout.calculate_log_probs).""",
    "set rollout.calculate_log_probs: true",
    needs_model=False,
    examples=Examples(
        bad={"rollout": {"calculate_log_probs": False}},
        good={"rollout": {"calculate_log_probs": True}},
        message="calculate_log_probs is false",
    ),
)
def correction_needs_logprobs(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.correction.method != "none" and not spec.rollout.calculate_log_probs:
        yield Finding(
            f"correction.method '{spec.correction.method}' needs rollout log-probs, "
            "but rollout.calculate_log_probs is false",
            "rollout.calculate_log_probs",
        )


@rule(
    "COR003",
    "clip-not-positive",
    "error",
    "Truncation threshold C must be positive.",
    """Truncated IS clamps the ratio at C (w = min(pi_train/pi_rollout, C)); verl's
    _parse_rollout_is_threshold rejects a non-positive upper bound (verl/trainer/ppo/rollout_corr_helper.py).
    The paper uses C = 2.""",
    "set correction.clip to a positive number; 2.0 is the paper's value",
    needs_model=False,
    examples=Examples(
        bad={"correction": {"clip": 0.0}}, good={"correction": {"clip": 2.0}}, message="must be > 0"
    ),
)
def clip_not_positive(ctx: ResolvedSpec) -> Iterator[Finding]:
    c = ctx.spec.correction
    if c.method in ("tis", "seq_tis") and c.clip <= 0:
        yield Finding(f"correction.clip is {c.clip:g}; it must be > 0", "correction.clip")


@rule(
    "COR004",
    "mask-bounds-invalid",
    "error",
    "Masked IS needs bounds [low, high] with 0 <= low < high.",
    """Masked importance sampling (IcePop, verl rollout_is_threshold "low_high") zeroes tokens whose ratio
    falls outside [low, high]; verl requires a positive upper bound and lower <= upper
    (rollout_corr_helper._parse_rollout_is_threshold). low == high masks almost everything.""",
    "set correction.bounds: [0.5, 5.0] (or your band) with low < high",
    needs_model=False,
    examples=Examples(
        bad={"correction": {"method": "mask", "bounds": [5.0, 0.5]}},
        good={"correction": {"method": "mask", "bounds": [0.5, 5.0]}},
        message="0 <= low < high",
    ),
)
def mask_bounds_invalid(ctx: ResolvedSpec) -> Iterator[Finding]:
    c = ctx.spec.correction
    if c.method not in _MASKED:
        return
    if c.bounds is None:
        yield Finding(
            f"correction.method '{c.method}' needs correction.bounds: [low, high]", "correction.method"
        )
        return
    low, high = c.bounds
    if low < 0 or low >= high:
        yield Finding(
            f"correction.bounds [{low:g}, {high:g}] must satisfy 0 <= low < high", "correction.bounds"
        )


@rule(
    "COR005",
    "rejection-option-unknown",
    "error",
    "A rejection-sampling option verl does not have.",
    """verl validates rollout_rs against SUPPORTED_ROLLOUT_RS_OPTIONS only at run time
    (verl/trainer/ppo/rollout_corr_helper.py), after the cluster has started; fp8spec checks the same list
    from the verl profile before launch.""",
    "use one of the options listed in the message (comma-separated for several)",
    needs_model=False,
    examples=Examples(
        bad={"correction": {"rejection": "seq_mean_k9"}},
        good={"correction": {"rejection": "seq_mean_k1"}},
        message="'seq_mean_k9'",
    ),
)
def rejection_option_unknown(ctx: ResolvedSpec) -> Iterator[Finding]:
    option = ctx.spec.correction.rejection
    allowed = ctx.fact("verl", "values.rollout_rs")
    if not option or not allowed:
        return
    bad = [o.strip() for o in option.split(",") if o.strip() not in allowed]
    if bad:
        yield Finding(
            f"correction.rejection has {', '.join(repr(b) for b in bad)}; verl {ctx.spec.stack.verl} accepts "
            + ", ".join(sorted(allowed)),
            "correction.rejection",
        )
