"""A plan's verdict and its ways out: the types feasibility's checks return (fp8spec.plan.feasibility) and the
costs their advice states, in the words `validate` and `plan` print."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Protocol

from fp8spec.plan.facts import estimate

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.plan.rollout import RolloutResult

GIB = 1 << 30


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class Advice:
    """One way out of a verdict: the text a user reads and, when it names values, the spec changes it stands
    for. Changes are applied and validated before the text is printed (fp8spec.rules.proposals.checked)."""

    text: str
    changes: tuple[tuple[str, object], ...] = ()
    fallback: bool = False  # tried only where no single change passes
    # what the change costs the run, shown next to it ('' when not estimated) and the estimated share of rollout
    # throughput it loses (0.0 none; None not estimated): proposals are ranked by it, cheapest first
    cost: str = ""
    loss: Optional[float] = None


def advice(text: str, cost: str = "", loss: Optional[float] = None, **changes: object) -> Advice:
    return Advice(text, tuple((k.replace("__", "."), v) for k, v in changes.items()), cost=cost, loss=loss)


NO_THROUGHPUT_COST = "no throughput cost"


@dataclass(frozen=True)
class LayoutError:
    """An error the rules report for the layout `plan --tp/--ep` asked about (fp8spec.rules.plan_layout)."""

    code: str
    path: str  # the spec field the rule points at
    message: str


class PlanRules(Protocol):
    """What only the rules know of a plan's verdicts, which its text and JSON print: the rule behind each code and
    the fix each failed verdict proposes, checked against every rule. The rules give it to the plan they judge
    (fp8spec.rules.plan_columns.judged), so the planner imports no rule."""

    def name(self, code: str) -> str: ...

    def is_error(self, code: str) -> bool: ...

    def fix(self, plan: MemoryPlan, verdict: Verdict) -> str: ...


def proposal_headroom() -> int:
    """Bytes every proposed memory fix leaves free beyond the estimate (memory_estimates.yaml proposals)."""
    return int(estimate("proposals", "headroom_bytes"))


def margin_text() -> str:
    return f"leaves {gib(proposal_headroom())} free beyond the estimate"


def _pct(x: float) -> str:
    """-0.94 -> '-94 %' (the sign always shown)."""
    return f"{x * 100:+.0f} %".replace("-0 %", "0 %").replace("+0 %", "0 %")


def concurrency_cost(running: int, cap: int, loss: float) -> str:
    """'concurrency 256 -> 16 per replica (-94 %), est. rollout throughput -50 %'."""
    return (
        f"concurrency {running} -> {cap} per replica ({_pct(cap / running - 1)}), "
        f"est. rollout throughput {_pct(-loss)}"
    )


def capped_throughput_loss(r: RolloutResult, cap: int, prompt: int, response: int) -> float:
    """Estimated share of rollout throughput lost by running at most ``cap`` sequences at once instead of
    ``r.running``: decode throughput taken as proportional to the sequences running, and the KV cache bounding
    them at the average sequence (prompt + half the response) either way."""
    average = r.kv.concurrency_at(prompt + max(1, response // 2))
    before = min(r.running, average)
    after = min(cap, average)
    return 0.0 if before <= 0 else max(0.0, 1 - after / before)


@dataclass(frozen=True)
class Verdict:
    code: str
    ok: bool
    message: str = ""
    advice: tuple[Advice, ...] = ()
    numbers: dict = field(default_factory=dict)
    path: str = ""  # the spec field the diagnostic points at

    @property
    def fix(self) -> str:
        """Every way out, unchecked (what the arithmetic suggests); users see the checked ones only."""
        return "; or ".join(a.text for a in self.advice)
