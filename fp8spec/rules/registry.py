"""The rule registry: each rule is a unit with a stable code, severity, rationale (with evidence) and fix hint.

Modelled on ruff's rule catalogue. Codes never change meaning; a retired rule keeps its code reserved.
Prefixes: COR correction, BLK block geometry, EXC exclusions, HW hardware, TRN training, KV kv cache,
PAR parallelism and sizes, LCH launchers, REF references (model catalog, backend profiles), RUN checkpoints,
validation and logging, RWD reward, MOE MoE routing, MDL model facts against the run, MEM memory
feasibility.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Optional

from fp8spec.check_unit import CheckUnit, Severity, folded, register_unit

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec
    from fp8spec.rules.examples import Examples

Scope = Literal["engine", "run"]


@dataclass(frozen=True)
class Finding:
    """One problem a rule found. ``path`` is the dotted spec path the diagnostic points at."""

    message: str
    path: str
    hint: Optional[str] = None
    # The field changes the hint proposes, each checked against every rule (fp8spec.rules.proposals).
    proposals: tuple = ()
    # what each proposal costs the run ('' where not estimated), in the order of ``proposals``
    costs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule(CheckUnit):
    check: Callable[["ResolvedSpec"], Iterable[Finding]]
    acknowledgeable: bool = False
    needs_model: bool = True
    engine: Optional[str] = None  # a rule of one rollout engine's folder runs only for specs on that engine
    # a spec fragment that fires it and one that does not (fp8spec.rules.examples); every shipped rule has them
    examples: Optional[Examples] = field(default=None, compare=False)
    # why the rule cannot judge ``ctx`` (its inputs are unknown), or None: such a rule is skipped, never passed
    skip_when: Optional[Callable[["ResolvedSpec"], Optional[str]]] = field(default=None, compare=False)
    # "engine": it judges the rollout engine alone and so also a standalone server; "run": the training run
    scope: Scope = "run"

    def concerns(self, ctx: ResolvedSpec) -> bool:
        """Whether the rule is about this spec at all: the spec's rollout engine is the rule's, if it belongs
        to one (a rule of another engine is not skipped, it does not apply)."""
        return self.engine is None or ctx.engine.owns(self.engine)

    def skip_reason(self, ctx: ResolvedSpec) -> Optional[str]:
        """Why the rule cannot run on ``ctx`` although it concerns it, or None when it runs."""
        if self.needs_model and ctx.model is None:
            return "the model is not resolved (REF001)"
        return self.skip_when(ctx) if self.skip_when is not None else None

    def applies(self, ctx: ResolvedSpec) -> bool:
        """Whether the rule runs on ``ctx``: it concerns the spec and nothing it needs is unknown."""
        return self.concerns(ctx) and self.skip_reason(ctx) is None


REGISTRY: dict[str, Rule] = {}


def rule(
    code: str,
    name: str,
    severity: Severity,
    summary: str,
    rationale: str,
    hint: str,
    *,
    acknowledgeable: bool = False,
    needs_model: bool = True,
    engine: Optional[str] = None,
    examples: Optional[Examples] = None,
    skip_when: Optional[Callable[["ResolvedSpec"], Optional[str]]] = None,
    scope: Scope = "run",
) -> Callable[[Callable[["ResolvedSpec"], Iterable[Finding]]], Callable[["ResolvedSpec"], Iterable[Finding]]]:
    """Register ``check`` under ``code``. ``needs_model`` rules are skipped when the model is unknown; an
    ``engine`` rule (one in fp8spec/engines/<engine>/rules.py) runs only on specs for that rollout engine.
    ``examples`` are the spec fragments that make it fire and keep it quiet, printed by `fp8spec rules CODE`
    and run by one test. ``skip_when`` says why the rule cannot judge a spec (reports list it as skipped, with
    that reason, never as passed); ``scope`` "engine" marks a rule that judges the rollout engine alone, so that
    a standalone server's bundle lists it."""

    def register(check: Callable[["ResolvedSpec"], Iterable[Finding]]):
        unit = Rule(
            code,
            name,
            severity,
            summary,
            folded(rationale),
            hint,
            check,
            acknowledgeable,
            needs_model,
            engine,
            examples,
            skip_when,
            scope,
        )
        register_unit(REGISTRY, unit, "rule")
        return check

    return register


def all_rules() -> list[Rule]:
    _load_rule_modules()
    return [REGISTRY[c] for c in sorted(REGISTRY)]


def get_rule(code: str) -> Optional[Rule]:
    _load_rule_modules()
    return REGISTRY.get(code.upper())


def rule_hint(code: str) -> str:
    """The fix hint of a registered rule (KeyError for a code no rule has: a bug)."""
    _load_rule_modules()
    return REGISTRY[code.upper()].hint


def _load_rule_modules() -> None:
    # Importing the modules registers their rules; kept here so the registry has one entry point. A topic with a
    # folder of its own keeps its rules there (fp8spec/exclusions/rules.py, fp8spec/trainers/megatron/rules.py),
    # and each rollout engine's folder may hold rules of its own (fp8spec/engines/<name>/rules.py), found here by
    # the engine's name (its descriptor is data and imports no rule).
    import fp8spec.exclusions.rules
    import fp8spec.trainers.megatron.rules  # noqa: F401
    from fp8spec.engines import engine_names
    from fp8spec.rules import (  # noqa: F401
        batching,
        blocks,
        cluster,
        correction,
        hardware_rules,
        kv_cache,
        launchers,
        memory,
        model_family,
        parallel,
        references,
        reward,
        routing,
        run,
        training,
        training_layout,
    )

    for name in engine_names():
        if importlib.util.find_spec(f"fp8spec.engines.{name}.rules") is not None:
            importlib.import_module(f"fp8spec.engines.{name}.rules")
