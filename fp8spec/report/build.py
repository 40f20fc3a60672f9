"""One report from its inputs: RUN's logs, and optionally the bundle it ran, the spec it was planned from and
a BF16 baseline run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from fp8spec.report.expect import ExpectError, plan_for, read_bundle
from fp8spec.report.logs import read_logs
from fp8spec.report.render import Report
from fp8spec.report.sources import SourceError, read_run
from fp8spec.report.steps import step_rows
from fp8spec.report.verdicts import Context, run_verdicts


class ReportInputError(Exception):
    """An input cannot be read (RUN, --bundle, --spec, --baseline); the message is located and for users."""


def make_report(
    run: Path, bundle: Optional[Path] = None, spec: Optional[Path] = None, baseline: Optional[Path] = None
) -> Report:
    try:
        logs = read_logs(read_run(run))
        ctx = Context(logs, step_rows(logs))
        if bundle is not None:
            ctx.bundle = read_bundle(bundle)
        if spec is not None:
            ctx.plan = plan_for(spec)
        if baseline is not None:
            ctx.baseline = step_rows(read_logs(read_run(baseline)))
    except (SourceError, ExpectError) as err:
        raise ReportInputError(str(err)) from None
    return Report(str(run), ctx, run_verdicts(ctx))
