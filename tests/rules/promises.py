"""What a hint or a plan's fix line promises: every `field: value` it names (`a: 1 or 2`, `a: 1, b: 2`),
read back from the printed text, so the property test checks what a user sees, not what a rule meant."""

from __future__ import annotations

import re
from typing import Any

from fp8spec.specfile.edit import EditError, with_values
from fp8spec.specfile.model import Spec

_VALUE = r"(?:-?[0-9]+(?:\.[0-9]+)?|true|false|[a-z][a-z0-9_]*)"
# a dotted spec path, a colon, a value, and alternatives for the same field ("rollout.tp: 2 or 4 or 8")
_ASSIGN = re.compile(rf"\b((?:[a-z_][a-z0-9_]*\.)+[a-z_][a-z0-9_]*): ({_VALUE}(?: or {_VALUE})*)(?![\w.])")


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", text):
        return float(text)
    return text


def current(spec: Spec, dotted: str) -> Any:
    node: Any = spec
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def is_field(spec: Spec, dotted: str) -> bool:
    try:
        current(spec, dotted)
    except AttributeError:
        return False
    return True


_CODES = r"(?:[A-Z]+[0-9]+(?: and (?=[A-Z]+[0-9]))?)+"
# 'X (then KV007 refuses the spec)', 'X (then KV008 warns)', 'X (then KV007 refuses the spec and KV008 warns)'
_REFUSED = re.compile(rf"\(then (?:({_CODES}) refuses? the spec)?(?: and )?(?:({_CODES}) warns?)?\)")


def refusals(text: str, spec: Spec) -> list[tuple[dict[str, Any], set[str], set[str]]]:
    """The changes a hint names as refused ('X (then KV007 refuses the spec)') or warned of ('X (then KV008
    warns)'), with the codes of the errors and of the warnings it names: claims too, which the property test
    checks."""
    out = []
    for clause in text.split(";"):
        m = _REFUSED.search(clause)
        if m and (m.group(1) or m.group(2)):
            errors = set(m.group(1).split(" and ")) if m.group(1) else set()
            warns = set(m.group(2).split(" and ")) if m.group(2) else set()
            out += [(changes, errors, warns) for changes in _assignments(clause[: m.start()], spec)]
    return out


# a value a hint names as general advice it did not check ('...; not checked here: ..., validate again)'): no promise
UNCHECKED = "not checked here"


def promises(text: str, spec: Spec) -> list[dict[str, Any]]:
    """Each change set the text proposes (clauses that name a refusal are not proposals: see refusals; nor are
    values in a parenthesis the hint marks as not checked)."""
    text = re.sub(rf"\([^()]*{UNCHECKED}[^()]*\)", "", text)
    return [c for clause in text.split(";") if not _REFUSED.search(clause) for c in _assignments(clause, spec)]


def _assignments(text: str, spec: Spec) -> list[dict[str, Any]]:
    """Within one clause (text between ';'), assignments joined only by ', ' are one change set; 'or' gives
    alternatives of one field. Dotted names that are not spec fields (verl keys, module names) are skipped."""
    out: list[dict[str, Any]] = []
    for clause in [text]:
        group: list[tuple[str, list[Any]]] = []
        end = None
        for m in _ASSIGN.finditer(clause):
            path = m.group(1)
            if not is_field(spec, path):
                continue
            values = [_value(v) for v in m.group(2).split(" or ")]
            joined = end is not None and clause[end : m.start()] == ", "
            if group and not joined:
                out.extend(_expand(group))
                group = []
            group.append((path, values))
            end = m.end()
        if group:
            out.extend(_expand(group))
    return out


def _expand(group: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    if len(group) == 1:
        path, values = group[0]
        return [{path: v} for v in values]
    return [{path: values[0] for path, values in group}]


def applies(spec: Spec, changes: dict[str, Any]) -> bool:
    try:
        with_values(spec, changes)
    except EditError:
        return False
    return True


def nested(changes: dict) -> dict:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``: dotted field changes as a spec fragment."""
    out: dict = {}
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out
