"""A verdict as a unit, modelled on the rule registry (fp8spec/rules/registry.py): a verdict is a unit with a
stable code, a severity, the reason it matters and the fix; its check reads a run (and what the bundle and the
plan expected) instead of a spec. Codes never change meaning. Prefix RPT; 0xx FP8 active, 01x health,
02x the run's state and logs, 03x performance against the plan. The check modules register here; the
registry (registry.py) loads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from fp8spec.check_unit import CheckUnit, Severity, folded, register_unit
from fp8spec.report.expect import BundleFacts, PlanFacts
from fp8spec.report.logs import Run
from fp8spec.report.steps import Row


@dataclass
class Context:
    run: Run
    rows: list[Row]
    bundle: Optional[BundleFacts] = None
    plan: Optional[PlanFacts] = None
    baseline: Optional[list[Row]] = None


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    where: str  # file:line (or the file) the message is about
    message: str
    hint: str


@dataclass(frozen=True)
class Verdict(CheckUnit):
    check: Callable[[Context], Iterable[tuple[str, str]]]  # yields (where, message)
    needs: str = ""  # "bundle", "plan" or "baseline": the check runs only when the report has it
    # (the real run damaged so that it fires, what its message then says, the real run it stays quiet on);
    # tests/report/test_verdicts.py runs both and checks the message
    example: tuple[str, str, str] = ("", "", "")

    def runs_on(self, ctx: Context) -> bool:
        return (
            not self.needs
            or (self.needs == "bundle" and ctx.bundle is not None)
            or (self.needs == "plan" and ctx.plan is not None)
            or (self.needs == "baseline" and ctx.plan is not None and ctx.baseline is not None)
        )


VERDICTS: dict[str, Verdict] = {}


def verdict(
    code: str,
    name: str,
    severity: Severity,
    summary: str,
    rationale: str,
    hint: str,
    needs: str = "",
    *,
    example: tuple[str, str, str],
) -> Callable[
    [Callable[[Context], Iterable[tuple[str, str]]]], Callable[[Context], Iterable[tuple[str, str]]]
]:
    def register(check: Callable[[Context], Iterable[tuple[str, str]]]):
        register_unit(
            VERDICTS,
            Verdict(code, name, severity, summary, folded(rationale), hint, check, needs, example),
            "verdict",
        )
        return check

    return register
