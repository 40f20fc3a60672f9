"""The field reference (docs/spec.md), generated from the spec model: every field with its type, default and
description. `fp8spec schema --docs docs/spec.md` writes it; tests/specfile/test_reference.py checks it is current
and that every field has a description."""

from __future__ import annotations

import typing
from typing import Any, Iterator, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fp8spec.specfile.fields import nested_model
from fp8spec.specfile.model import Spec

HEADER = """# Spec field reference

Generated from the spec model by `fp8spec schema --docs docs/spec.md`; do not edit by hand (a test checks
that it is current). Every field, its type, its default and what it becomes. In descriptions, a dotted name
in parentheses is the verl Hydra key the field sets (`actor.`, `rollout.` and `ref.` keys sit under
`actor_rollout_ref.`), `--flag` is an engine flag of a standalone server bundle and `#SBATCH` a Slurm
option; `fp8spec explain SPEC` shows every key a spec becomes, with the reason. Types are strict: booleans
are `true`/`false`, numbers are unquoted, text that looks like a number is quoted (`cuda: "12.9"`). The JSON
Schema for editors: `specs/fp8spec.schema.json` (`fp8spec schema`).
"""


def fields(
    model: type[BaseModel] = Spec, prefix: str = ""
) -> Iterator[tuple[str, FieldInfo, type[BaseModel] | None]]:
    """(dotted path, field, section model or None) for every field, depth first in declaration order."""
    for name, info in model.model_fields.items():
        section = nested_model(info.annotation)
        yield prefix + name, info, section
        if section is not None:
            yield from fields(section, f"{prefix}{name}.")


def reference_markdown() -> str:
    out = [HEADER]
    for path, info, section in fields():
        if section is None:
            continue
        out.append(f"\n## `{path}`\n")
        out.append(f"{info.description}{' Required.' if info.is_required() else ''}\n")
        out.append("| field | type | default | description |")
        out.append("|---|---|---|---|")
        for name, sub in section.model_fields.items():
            kind = (
                "section"
                if nested_model(sub.annotation) is not None
                else _type_text(sub.annotation, sub.metadata)
            )
            out.append(
                f"| `{path}.{name}` | {_cell(kind)} | {_cell(_default_text(sub))} | "
                f"{_cell(sub.description or '')} |"
            )
    top = [(p, i) for p, i, s in fields() if "." not in p and s is None]
    out.append("\n## Top level\n")
    out.append("| field | type | default | description |")
    out.append("|---|---|---|---|")
    for path, info in top:
        out.append(
            f"| `{path}` | {_cell(_type_text(info.annotation, info.metadata))} | "
            f"{_cell(_default_text(info))} | {_cell(info.description or '')} |"
        )
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _bounds(metadata) -> str:
    """' 1..4096' from a field's constraints (pydantic keeps them as objects with ge/gt/le/lt)."""
    low = high = None
    for m in metadata:
        if isinstance(m, FieldInfo):
            nested = _bounds(m.metadata)
            if nested:
                return nested
        for attr, sign in (("ge", ""), ("gt", ">")):
            if getattr(m, attr, None) is not None:
                low = f"{sign}{getattr(m, attr)}"
        for attr, sign in (("le", ""), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                high = f"{sign}{getattr(m, attr)}"
    if low is None and high is None:
        return ""
    return f" {low if low is not None else ''}..{high if high is not None else ''}"


def _type_text(annotation: Any, metadata=()) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0], list(args[1:]) + list(metadata))
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is Union:
        parts = [_type_text(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        if origin is tuple:
            return "[" + ", ".join(_type_text(a) for a in args) + "]"
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"mapping of {_type_text(args[0])} to {_type_text(args[1])}"
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer" + _bounds(metadata)
    if annotation is float:
        return "number" + _bounds(metadata)
    if annotation is str:
        return "text"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        if nested_model(info.annotation) is not None:
            return "(section)"
        value = info.default_factory()  # type: ignore[call-arg]  # the spec's factories take no argument
    else:
        value = info.default
    return f"`{_yaml_value(value)}`"


def _yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return f'"{value}"' if _looks_typed(value) else value
    return repr(value) if isinstance(value, float) else str(value)


def _looks_typed(text: str) -> bool:
    """Text a YAML reader would take for another type unquoted (a version like 12.9, true, null)."""
    return text.replace(".", "", 1).isdigit() or text.lower() in ("true", "false", "null", "~", "")
