"""The report's verdicts: each a registered unit with a code (RPTnnn), severity, rationale and fix hint,
explained by `fp8spec rules CODE` like a rule."""

from fp8spec.report.verdicts.registry import all_verdicts, get_verdict, run_verdicts
from fp8spec.report.verdicts.unit import Context, Finding, Verdict

__all__ = ["Context", "Finding", "Verdict", "all_verdicts", "get_verdict", "run_verdicts"]
