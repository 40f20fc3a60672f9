"""`fp8spec report`: read a finished or running job's logs and say whether FP8 was on, healthy and paying;
and the report's verdict codes for `fp8spec rules`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from fp8spec.cli_options import (
    JSON_OUTPUT,
    check_format,
    fail,
    format_option,
    json_failure,
    output_folder,
    usage_error,
)
from fp8spec.diagnostics import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_RULE_ERRORS, printable


def report(
    run: Path = typer.Argument(
        ...,
        metavar="RUN",
        show_default=False,
        help="The run's log: the driver's console log, a folder of logs (Ray's worker logs), or an archive "
        "(.tgz, .tar.gz, .tar, .zip).",
    ),
    bundle: Optional[Path] = typer.Option(
        None,
        "--bundle",
        metavar="DIR",
        help="The bundle folder the run was launched from: its patches are checked against the run's lines.",
    ),
    spec: Optional[Path] = typer.Option(
        None,
        "--spec",
        metavar="SPEC",
        help="The spec the bundle was compiled from: the run's KV capacity is compared with fp8spec plan's.",
    ),
    baseline: Optional[Path] = typer.Option(
        None,
        "--baseline",
        metavar="RUN",
        help="A BF16 run of the same workload: generation throughput is judged against the plan's expected "
        "speed-up (needs --spec).",
    ),
    format: str = format_option(),
    output: Optional[str] = typer.Option(
        None,
        "--output",
        "-o",
        metavar="DIR",
        help="Also write report.svg (per-step phases, mismatch KL) and, with matplotlib, report.png here.",
    ),
) -> None:
    """A run's per-step table (generation, log-prob, update, weight sync, mismatch, KV scales) and verdicts:
    FP8 active as compiled, healthy, paying as planned. Exit 0 no error verdict, 1 an error verdict, 2 an input
    that cannot be read or bad usage."""
    check_format(format)
    JSON_OUTPUT["on"] = format == "json"  # every failure below prints one JSON document too
    out_dir = output_folder(output) if output is not None else None
    if baseline is not None and spec is None:
        usage_error("--baseline compares the run's speed-up with fp8spec plan's: give --spec SPEC too")
    try:
        _report(run, bundle, spec, baseline, format, out_dir)
    except (typer.Exit, SystemExit):
        raise
    except Exception as exc:  # a bug: one line (one JSON document with --format json), exit 3
        if os.environ.get("FP8SPEC_DEBUG"):
            raise
        message = f"internal error: {type(exc).__name__}: {exc} (set FP8SPEC_DEBUG=1 for details)"
        if JSON_OUTPUT["on"]:
            json_failure("internal", printable(message))
        typer.echo(f"fp8spec: {printable(message)}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None


def _report(
    run: Path,
    bundle: Optional[Path],
    spec: Optional[Path],
    baseline: Optional[Path],
    format: str,
    out_dir: Optional[Path],
) -> None:
    from fp8spec.report.build import ReportInputError, make_report
    from fp8spec.report.render import render_json, render_text

    try:
        rep = make_report(run, bundle, spec, baseline)
    except ReportInputError as err:
        fail(EXIT_BAD_INPUT, str(err))
    files = _write_pictures(rep, out_dir) if out_dir is not None else []
    if format == "json":
        typer.echo(render_json(rep, files))
    else:
        for line in render_text(rep).splitlines():  # log text is shown, never interpreted by the terminal
            typer.echo(printable(line))
        for name in files:
            typer.echo(f"wrote {printable(name)}", err=True)
    raise typer.Exit(EXIT_RULE_ERRORS if rep.errors else EXIT_OK)


def _write_pictures(rep: Any, out_dir: Path) -> list[str]:
    from fp8spec.report.figure import report_png, report_svg
    from fp8spec.report.write import WriteError, write_file

    title = f"{Path(rep.run_name).name}: per-step phases and mismatch KL"
    base = rep.ctx.baseline
    if base:
        title = f"{Path(rep.run_name).name}: phases per step, mean step vs baseline, mismatch KL"
    written = []
    try:
        written.append(
            str(write_file(out_dir, "report.svg", report_svg(rep.ctx.rows, title, base).encode("utf-8")))
        )
        png = report_png(rep.ctx.rows, title, base)
        if png is not None:
            written.append(str(write_file(out_dir, "report.png", png)))
    except WriteError as err:
        fail(EXIT_BAD_INPUT, str(err))
    return written


def verdict_lines() -> list[str]:
    """`fp8spec rules`' listing of the report's verdicts, in the rules' layout."""
    from fp8spec.report.verdicts import all_verdicts

    return [
        f"{v.code:<6}  {v.severity:<7}  {v.name:<34} {v.summary} (fp8spec report)" for v in all_verdicts()
    ]


def verdict_listing() -> list[dict[str, Any]]:
    from fp8spec.report.verdicts import all_verdicts

    return [_summary(v) for v in all_verdicts()]


def _summary(v: Any) -> dict[str, Any]:
    return {"code": v.code, "name": v.name, "severity": v.severity, "summary": v.summary, "command": "report"}


def explain_verdict(code: str, as_json: bool) -> bool:
    """Print one verdict's explanation for `fp8spec rules CODE`; False when no verdict has the code."""
    from fp8spec.report.verdicts import get_verdict

    v = get_verdict(code)
    if v is None:
        return False
    needs = {
        "bundle": " (with --bundle)",
        "plan": " (with --spec)",
        "baseline": " (with --spec and --baseline)",
    }
    if as_json:
        fires, says, passes = v.example
        data = {
            **_summary(v),
            "rationale": v.rationale,
            "hint": v.hint,
            "needs": v.needs or None,
            "examples": {"fires": fires, "message": says, "passes": passes},
        }
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return True
    typer.echo(f"{v.code} {v.name} ({v.severity}, a verdict of fp8spec report{needs.get(v.needs, '')})\n")
    typer.echo(f"{v.summary}\n")
    typer.echo(f"Why: {v.rationale}\n")
    typer.echo(f"Fix: {v.hint}\n")
    fires, says, passes = v.example
    typer.echo(f'Fires on {fires} (the message says "{says}").')
    typer.echo(f"Passes on {passes}.")
    typer.echo("(each a real run of tests/data/report/, damaged by tests/report/test_verdicts.py)")
    return True
