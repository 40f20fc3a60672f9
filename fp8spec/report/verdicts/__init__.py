"""The report's verdicts: each a registered unit with a code (RPTnnn), severity, rationale and fix hint,
explained by `fp8spec rules CODE` like a rule."""

from fp8spec.report.verdicts.registry import (
    Context,
    Finding,
    Verdict,
    all_verdicts,
    get_verdict,
    run_verdicts,
)

__all__ = ["Context", "Finding", "Verdict", "all_verdicts", "get_verdict", "run_verdicts"]
