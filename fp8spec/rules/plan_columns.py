"""Which of the plan's side-by-side columns (BF16, FP8 W8A8, FP8 W8A8 + FP8 KV) the rules refuse for this spec.

A column is the spec with that column's linear.quantize and kv_cache.dtype. It is refused when no variant of it
(the spec's KV-scale recalibration, or any other) passes every rule without adding an error: the plan then shows
no expected gain for it (an MLA model's FP8 KV with per-step scales is KV005's; SGLang's is KV007's). Run on a
validated context only, never inside a rule (it validates variants of the spec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.plan.rollout import Choice
    from fp8spec.resolve.context import ResolvedSpec

RECALIBRATIONS = ("per_step", "once", "none")


def column_changes(choice: Choice) -> dict:
    return {"linear.quantize": choice.quantized is not None, "kv_cache.dtype": choice.kv_dtype}


def refusals(ctx: ResolvedSpec, columns: list[tuple[Choice, bool]]) -> dict[str, tuple[str, ...]]:
    """Choice key -> the codes of the errors that refuse it (the spec's own column is never judged here: its
    own errors are the plan's verdicts)."""
    from fp8spec.rules.proposals import refusing

    out: dict[str, tuple[str, ...]] = {}
    for choice, is_spec in columns:
        if is_spec:
            continue
        base = column_changes(choice)
        variants = [base] + [
            {**base, "kv_cache.recalibrate": r} for r in RECALIBRATIONS if r != ctx.spec.kv_cache.recalibrate
        ]
        codes = refusing(ctx, variants)
        if codes:
            out[choice.key] = codes
    return out


def judged(plan: MemoryPlan, ctx: ResolvedSpec) -> MemoryPlan:
    """``plan`` judged by the rules, as the command and the bundle README print it (never inside a rule): its
    columns the rules refuse, and the rules' names and checked fixes for its verdicts."""
    from dataclasses import replace

    from fp8spec.plan.rollout import choices
    from fp8spec.rules.plan_advice import PLAN_RULES

    return replace(plan, refused=refusals(ctx, choices(ctx)), rules=PLAN_RULES)
