"""The verdict registry: loads the check modules (each registers its verdicts in fp8spec.report.verdicts.unit)
and runs every verdict that applies."""

from __future__ import annotations

from typing import Optional

# Importing the check modules registers their verdicts.
import fp8spec.report.verdicts.active
import fp8spec.report.verdicts.health
import fp8spec.report.verdicts.perf
import fp8spec.report.verdicts.state  # noqa: F401
from fp8spec.report.verdicts.unit import VERDICTS, Context, Finding, Verdict


def all_verdicts() -> list[Verdict]:
    return [VERDICTS[c] for c in sorted(VERDICTS)]


def get_verdict(code: str) -> Optional[Verdict]:
    return VERDICTS.get(code.strip().upper())


def run_verdicts(ctx: Context) -> list[Finding]:
    """Every verdict that applies, in code order; each finding in the order its check found it."""
    out = []
    for v in all_verdicts():
        if v.runs_on(ctx):
            out += [Finding(v.code, v.severity, where, message, v.hint) for where, message in v.check(ctx)]
    return out
