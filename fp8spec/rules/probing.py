"""The proposal prober: what checks a hint's candidate values by running every rule again on the changed spec.

A separate object from the resolved spec (rules read the spec, never the prober): the rule runner makes one per
validation and makes it the active one while each rule runs; ``fp8spec.rules.proposals.proposal()`` asks for
it. A probe's own rule run has PROBE active instead: it only needs to know whether each rule fires.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

Changes = Mapping[str, Any]
Found = tuple[str, str, str]  # (code, spec path, severity)
Findings = frozenset[Found]


class Prober:
    """Checks candidate changes of one resolved spec: applies each, runs every rule on the changed spec with
    ``run`` (the rule runner's, as a probe that proposes nothing) and keeps its findings per change, so rules
    that try the same change share one run. The rule runner makes one per validation; rules never see it,
    ``proposal()`` asks the active one."""

    def __init__(self, ctx: ResolvedSpec, run: Callable[[ResolvedSpec], Findings]) -> None:
        self.ctx = ctx
        self._run = run
        self._found: dict[tuple, Optional[Findings]] = {}

    def findings(self, changes: Changes) -> Optional[Findings]:
        """Findings of the spec with ``changes`` applied; None when a changed value is not one the field takes."""
        from fp8spec.resolve.context import derived_context
        from fp8spec.specfile.edit import EditError, with_values

        key = tuple(sorted(changes.items(), key=lambda kv: kv[0]))
        if key not in self._found:
            try:
                spec = with_values(self.ctx.spec, changes)
            except EditError:
                self._found[key] = None
            else:
                self._found[key] = self._run(derived_context(self.ctx, spec))
        return self._found[key]


# What the rules running now propose with: a Prober, PROBE (a probe's own run: it only needs to know whether
# each rule fires, so no proposal is checked), or nothing (a rule checked outside the runner).
PROBE = object()
_ACTIVE: ContextVar[object] = ContextVar("fp8spec_prober", default=None)


def active_prober() -> object:
    return _ACTIVE.get()


@contextmanager
def proposing_with(prober: object) -> Iterator[None]:
    """Rules called inside check their proposals with ``prober`` (a Prober, or PROBE)."""
    token = _ACTIVE.set(prober)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
