"""What a check registered as a unit carries, whatever it reads: a spec rule (fp8spec/rules/registry.py) or a
run's verdict (fp8spec/report/verdicts/unit.py). Kept apart from both so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, MutableMapping, TypeVar

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class CheckUnit:
    """A stable code that never changes meaning, a severity, the reason it matters and the fix."""

    code: str
    name: str
    severity: Severity
    summary: str
    rationale: str
    hint: str


U = TypeVar("U", bound=CheckUnit)


def register_unit(table: MutableMapping[str, U], unit: U, kind: str) -> None:
    """Adds ``unit`` under its code; a second unit with the same code is a bug in the package, not the input."""
    if unit.code in table:
        raise RuntimeError(f"{kind} code {unit.code} registered twice")
    table[unit.code] = unit


def folded(rationale: str) -> str:
    """The rationale as one line: the source writes it as an indented triple-quoted string."""
    return " ".join(rationale.split())
