"""Is the layout ``plan --tp/--ep`` asks about one the rules accept? The plan's arithmetic takes any numbers; a
layout vLLM, SGLang or verl refuse at start-up (heads that do not split over TP, GPUs that are not a multiple of
the replica) would still "fit". So the spec with the overridden layout goes through every rule, as a hint's
proposal does (fp8spec.rules.proposals), and each error it adds is the plan's verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8spec.plan.verdict import LayoutError

if TYPE_CHECKING:
    from fp8spec.plan.setup import Overrides
    from fp8spec.resolve.context import ResolvedSpec


class LayoutInputError(ValueError):
    """An overridden value the spec field does not take."""


def layout_changes(ctx: ResolvedSpec, overrides: Overrides) -> dict[str, int]:
    spec = ctx.spec
    changes = {}
    if overrides.tp is not None and overrides.tp != spec.rollout.tp:
        changes["rollout.tp"] = overrides.tp
    if overrides.ep is not None and overrides.ep != spec.rollout.ep:
        changes["rollout.ep"] = overrides.ep
    return changes


def layout_errors(ctx: ResolvedSpec, overrides: Overrides) -> tuple[LayoutError, ...]:
    """The errors the rules report for the spec with the plan's layout overrides that they do not report for
    the spec itself (its own are the spec's diagnostics); none without overrides."""
    from fp8spec.resolve.context import derived_context
    from fp8spec.rules.runner import run_rules
    from fp8spec.specfile.edit import EditError, with_values

    changes = layout_changes(ctx, overrides)
    if not changes:
        return ()
    try:
        changed = derived_context(ctx, with_values(ctx.spec, changes))
    except EditError as err:
        raise LayoutInputError(str(err)) from None

    def errors(of: ResolvedSpec) -> list[LayoutError]:
        acknowledged = set(of.spec.acknowledge)
        out = []
        for rule, found in run_rules(of, probe=True):
            if isinstance(found, Exception) or rule.severity != "error" or rule.code in acknowledged:
                continue
            out += [LayoutError(rule.code, f.path, f.message) for f in found]
        return out

    before = {(e.code, e.path) for e in errors(ctx)}
    return tuple(e for e in errors(changed) if (e.code, e.path) not in before)
