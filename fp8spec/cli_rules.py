"""`fp8spec rules`: the rules, the reader's and schema's codes and the report's verdicts, or one of them
explained."""

from __future__ import annotations

import json
from typing import Optional

import typer

from fp8spec.cli_options import check_format, complete_code, fail, format_option
from fp8spec.cli_report import explain_verdict, verdict_lines, verdict_listing
from fp8spec.diagnostics import EXIT_BAD_INPUT


def rules(
    code: Optional[str] = typer.Argument(
        None,
        metavar="CODE",
        autocompletion=complete_code,
        help="A code fp8spec printed (BLK001, S002, E003, ...) to explain, with a rule's examples.",
    ),
    format: str = format_option(),
) -> None:
    """List the rules and the reader's and schema's codes, or explain one code."""
    from fp8spec.rules import describe
    from fp8spec.rules.registry import all_rules, get_rule
    from fp8spec.specfile.codes import input_code, input_codes

    check_format(format)
    as_json = format == "json"
    if code is None:
        if as_json:
            listing = {
                "rules": [describe.rule_summary_data(r) for r in all_rules()],
                "input_codes": [describe.input_code_data(c) for c in input_codes().values()],
                "report_verdicts": verdict_listing(),
            }
            typer.echo(json.dumps(listing, indent=2, sort_keys=True))
            return
        for r in all_rules():
            typer.echo(describe.rule_line(r))
        typer.echo("")
        for ic in input_codes().values():
            typer.echo(describe.input_code_line(ic))
        typer.echo("")
        for line in verdict_lines():
            typer.echo(line)
        return
    rule = get_rule(code)
    if rule is not None:
        data = describe.rule_data(rule)
        typer.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else describe.rule_text(rule))
        return
    if explain_verdict(code, as_json):
        return
    c = input_code(code)
    if c is None:
        fail(EXIT_BAD_INPUT, f"no rule or code {code!r}; `fp8spec rules` lists them")
    if as_json:
        typer.echo(json.dumps(describe.input_code_data(c), indent=2, sort_keys=True))
        return
    typer.echo(f"{c.code} {c.name} (error: {c.kind}, exit {c.exit_code})\n")
    typer.echo(f"{c.summary}\n")
    typer.echo(f"Why: {c.why}\n")
    typer.echo(f"Fix: {c.fix}")
