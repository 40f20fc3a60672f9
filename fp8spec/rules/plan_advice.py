"""A failed verdict's advice as the hint users read: `validate` (the MEM rules) and `plan` (its fix lines)
print the same text, and every value in it has been applied and validated first (fp8spec.rules.proposals)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8spec.rules.proposals import cost_key, proposal
from fp8spec.rules.registry import get_rule, rule_hint

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.plan.verdict import Verdict
    from fp8spec.resolve.context import ResolvedSpec


def advised(ctx: ResolvedSpec, verdict: Verdict) -> tuple[str, tuple]:
    """Hint and proposals for a failed verdict: the values its advice names, each applied and validated (pairs
    of them where none passes alone); the value-free advice, or the rule's general fix, where none does."""
    layout = _layout_errors(ctx)
    if layout:
        # the memory model is of a layout the rules refuse: values for it would chase that error's knock-ons
        return (
            f"fix the layout first ({', '.join(layout)}): the memory estimate depends on it, so no value is "
            "proposed here until it validates",
            (),
        )
    valued = [a for a in verdict.advice if a.changes]
    # cheapest first: a change with no throughput cost before one that trades throughput for memory, so the
    # first proposal (the one `fp8spec init` applies) is the cheapest that passes; unestimated costs keep their
    # place among the free ones
    valued.sort(key=lambda a: a.loss or 0.0)
    candidates = [dict(a.changes) for a in valued if not a.fallback]
    fallbacks = [dict(a.changes) for a in valued if a.fallback]
    costs = {cost_key(dict(a.changes)): a.cost for a in valued if a.cost}
    general = "; or ".join(a.text for a in verdict.advice if not a.changes) or rule_hint(verdict.code)
    return proposal(ctx, verdict.code, verdict.path, candidates, general, fallbacks, costs)


LAYOUT_FIELDS = ("training.parallel", "rollout.tp", "rollout.ep", "hardware.nodes", "hardware.gpus_per_node")


def _layout_errors(ctx: ResolvedSpec) -> list[str]:
    """Codes of the errors the spec has at its parallel layout (none inside a probe)."""
    from fp8spec.rules.proposals import current_findings

    found = current_findings(ctx)
    return sorted(
        {
            code
            for code, path, severity in found
            if severity == "error" and any(path == f or path.startswith(f + ".") for f in LAYOUT_FIELDS)
        }
    )


def proposal_costs(verdict: Verdict, proposals: tuple) -> tuple[str, ...]:
    """What each of ``proposals`` (as ``advised`` returns them) costs the run, '' where not estimated."""
    costs = {cost_key(dict(a.changes)): a.cost for a in verdict.advice if a.changes}
    return tuple(costs.get(cost_key(p), "") for p in proposals)


def fix_line(plan: MemoryPlan, verdict: Verdict) -> str:
    """A failed verdict's fix line in `plan`: the hint `validate` prints for it, values checked against every
    rule (here, with the rules: checking a value runs them, and the planner imports no rule)."""
    if plan.ctx is None:
        return "; or ".join(a.text for a in verdict.advice if not a.changes)
    return advised(plan.ctx, verdict)[0]


class _PlanRules:
    """The rules' side of a printed plan (fp8spec.plan.verdict.PlanRules)."""

    def name(self, code: str) -> str:
        rule = get_rule(code)
        return rule.name if rule is not None else ""

    def is_error(self, code: str) -> bool:
        rule = get_rule(code)
        return rule is None or rule.severity == "error"

    def fix(self, plan: MemoryPlan, verdict: Verdict) -> str:
        return fix_line(plan, verdict)


PLAN_RULES = _PlanRules()
