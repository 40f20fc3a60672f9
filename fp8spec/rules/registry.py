"""The rule registry: each rule is a unit with a stable code, severity, rationale (with evidence) and fix hint.

Modelled on ruff's rule catalogue. Codes never change meaning; a retired rule keeps its code reserved.
Prefixes: COR correction, BLK block geometry, EXC exclusions, HW hardware, TRN training, KV kv cache,
PAR parallelism and sizes, LCH launchers, REF references (model catalog, backend profiles), RUN checkpoints,
validation and logging, RWD reward, MOE MoE routing, MDL model facts against the run, MEM memory
feasibility.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Optional

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec
    from fp8spec.rules.examples import Examples

Severity = Literal["error", "warning"]


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
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    rationale: str
    hint: str
    check: Callable[["ResolvedSpec"], Iterable[Finding]]
    acknowledgeable: bool = False
    needs_model: bool = True
    engine: Optional[str] = None  # a rule of one rollout engine's folder runs only for specs on that engine
    # a spec fragment that fires it and one that does not (fp8spec.rules.examples); every shipped rule has them
    examples: Optional[Examples] = field(default=None, compare=False)

    def applies(self, ctx: ResolvedSpec) -> bool:
        """Whether the rule runs on ``ctx``: its model is known if it needs one, and the spec's rollout engine
        is the rule's, if it belongs to one."""
        if self.needs_model and ctx.model is None:
            return False
        return self.engine is None or ctx.engine.owns(self.engine)


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
) -> Callable[[Callable[["ResolvedSpec"], Iterable[Finding]]], Callable[["ResolvedSpec"], Iterable[Finding]]]:
    """Register ``check`` under ``code``. ``needs_model`` rules are skipped when the model is unknown; an
    ``engine`` rule (one in fp8spec/engines/<engine>/rules.py) runs only on specs for that rollout engine.
    ``examples`` are the spec fragments that make it fire and keep it quiet, printed by `fp8spec rules CODE`
    and run by one test."""

    def register(check: Callable[["ResolvedSpec"], Iterable[Finding]]):
        if code in REGISTRY:
            raise RuntimeError(f"rule code {code} registered twice")
        REGISTRY[code] = Rule(
            code,
            name,
            severity,
            summary,
            " ".join(rationale.split()),
            hint,
            check,
            acknowledgeable,
            needs_model,
            engine,
            examples,
        )
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
    # folder of its own keeps its rules there (fp8spec/exclusions/rules.py, fp8spec/megatron/rules.py), and each
    # rollout engine's folder may hold rules of its own (fp8spec/engines/<name>/rules.py), loaded through its
    # engine.
    import fp8spec.exclusions.rules
    import fp8spec.megatron.rules  # noqa: F401
    from fp8spec.engines import all_engines
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
    )

    for engine in all_engines():
        engine.load_rules()
