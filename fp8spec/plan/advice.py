"""A failed verdict's advice as the hint users read: `validate` (the MEM rules) and `plan` (its fix lines)
print the same text, and every value in it has been applied and validated first (fp8spec.rules.proposals)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import rule_hint

if TYPE_CHECKING:
    from fp8spec.plan.feasibility import Verdict
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.resolve.context import ResolvedSpec


def advised(ctx: ResolvedSpec, verdict: Verdict) -> tuple[str, tuple]:
    """Hint and proposals for a failed verdict: the values its advice names, each applied and validated (pairs
    of them where none passes alone); the value-free advice, or the rule's general fix, where none does."""
    candidates = [dict(a.changes) for a in verdict.advice if a.changes and not a.fallback]
    fallbacks = [dict(a.changes) for a in verdict.advice if a.changes and a.fallback]
    general = "; or ".join(a.text for a in verdict.advice if not a.changes) or rule_hint(verdict.code)
    return proposal(ctx, verdict.code, verdict.path, candidates, general, fallbacks)


def fix_line(plan: MemoryPlan, verdict: Verdict) -> str:
    """A failed verdict's fix line in `plan`: the hint `validate` prints for it, values checked against every
    rule (here, not in MemoryPlan: the resolved spec holds the plan, and the prober resolves specs)."""
    if plan.ctx is None:
        return "; or ".join(a.text for a in verdict.advice if not a.changes)
    return advised(plan.ctx, verdict)[0]
