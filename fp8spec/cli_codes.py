"""`fp8spec rules --format json`: every code fp8spec prints (rules, the reader's and schema's), as data; and the
--format check the commands with a JSON view share."""

from __future__ import annotations

from typing import Any, Optional

import typer

from fp8spec.cli_options import fail, usage_error
from fp8spec.diagnostics import EXIT_BAD_INPUT


def check_format(format: str) -> None:
    if format not in ("text", "json"):
        usage_error(f"--format must be text or json, not {format!r}")


def _rule_record(r: Any) -> dict:
    return {
        "code": r.code,
        "kind": "rule",
        "name": r.name,
        "severity": r.severity,
        "acknowledgeable": r.acknowledgeable,
        "summary": r.summary,
        "why": r.rationale,
        "fix": r.hint,
    }


def _input_code_record(c: Any) -> dict:
    return {
        "code": c.code,
        "kind": c.kind,
        "name": c.name,
        "severity": "error",
        "exit_code": c.exit_code,
        "summary": c.summary,
        "why": c.why,
        "fix": c.fix,
    }


def rules_json(code: Optional[str]) -> None:
    """`rules --format json`: every code (rules, then the reader's and schema's), or the one asked for."""
    import json

    from fp8spec.rules.registry import all_rules, get_rule
    from fp8spec.specfile.codes import input_code, input_codes

    if code is None:
        records = [_rule_record(r) for r in all_rules()]
        records += [_input_code_record(c) for c in input_codes().values()]
        typer.echo(json.dumps({"codes": records}, indent=2, sort_keys=True))
        return
    rule = get_rule(code)
    found = input_code(code) if rule is None else None
    if rule is None and found is None:
        fail(EXIT_BAD_INPUT, f"no rule or code {code!r}; `fp8spec rules` lists them")
    record = _rule_record(rule) if rule is not None else _input_code_record(found)
    typer.echo(json.dumps(record, indent=2, sort_keys=True))
