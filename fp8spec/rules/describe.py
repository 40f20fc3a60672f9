"""What `fp8spec rules` prints: the list of codes, one rule with its examples, or one input code, as text or
as JSON data (the same facts either way)."""

from __future__ import annotations

import io
from typing import Any, Mapping

from ruamel.yaml import YAML

from fp8spec.rules.examples import BASE_NAME, Examples
from fp8spec.rules.registry import Rule
from fp8spec.specfile.codes import InputCode


def rule_line(r: Rule) -> str:
    ack = " (acknowledgeable)" if r.acknowledgeable else ""
    return f"{r.code:<6}  {r.severity:<7}  {r.name:<34} {r.summary}{ack}"


def input_code_line(c: InputCode) -> str:
    return f"{c.code:<6}  {'error':<7}  {c.name:<34} {c.summary} (exit {c.exit_code})"


def rule_text(r: Rule) -> str:
    lines = [
        f"{r.code} {r.name} ({r.severity}{', acknowledgeable' if r.acknowledgeable else ''})",
        "",
        r.summary,
        "",
        f"Why: {r.rationale}",
        "",
        f"Fix: {r.hint}",
    ]
    if r.examples is not None:
        lines += ["", *_examples_text(r.examples)]
    return "\n".join(lines)


def _examples_text(ex: Examples) -> list[str]:
    out = [f'Fires (the message says "{ex.message}"):', *_yaml_lines(ex.bad)]
    for good in ex.good_fragments:
        out += ["", "Passes:", *_yaml_lines(good)]
    for name, text in sorted(ex.files.items()):
        out += ["", f"with {name} beside the spec:", *("  " + line for line in text.splitlines())]
    out += ["", f"(each example is a fragment of a spec, merged over {BASE_NAME})"]
    return out


def _yaml_lines(fragment: Mapping[str, Any]) -> list[str]:
    if not fragment:
        return ["  {}  (the base spec as it is)"]
    buf = io.StringIO()
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.dump(_plain(fragment), buf)
    return ["  " + line for line in buf.getvalue().splitlines()]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def rule_data(r: Rule) -> dict[str, Any]:
    data: dict[str, Any] = {
        "code": r.code,
        "name": r.name,
        "severity": r.severity,
        "acknowledgeable": r.acknowledgeable,
        "summary": r.summary,
        "rationale": r.rationale,
        "hint": r.hint,
    }
    if r.examples is not None:
        ex = r.examples
        data["examples"] = {
            "base": BASE_NAME,
            "bad": _plain(ex.bad),
            "good": [_plain(g) for g in ex.good_fragments],
            "message": ex.message,
            "files": dict(sorted(ex.files.items())),
        }
    return data


def rule_summary_data(r: Rule) -> dict[str, Any]:
    return {
        "code": r.code,
        "name": r.name,
        "severity": r.severity,
        "acknowledgeable": r.acknowledgeable,
        "summary": r.summary,
    }


def input_code_data(c: InputCode) -> dict[str, Any]:
    return {
        "code": c.code,
        "name": c.name,
        "kind": c.kind,
        "exit_code": c.exit_code,
        "summary": c.summary,
        "why": c.why,
        "fix": c.fix,
    }
