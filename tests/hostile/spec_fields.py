"""Every string field of the spec model, found by walking the model (new fields are covered without edits),
and a writer that puts any Python string into a spec file exactly (YAML escapes for everything unusual)."""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel

from fp8spec.specfile.model import Spec


def _kinds(annotation: Any) -> set[str]:
    """'str' (a free string), 'list' (a list of strings), 'dict' (string values) within one annotation."""
    origin = typing.get_origin(annotation)
    if annotation is str:
        return {"str"}
    if origin is Literal:
        return set()
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin is list:
        return {"list"} if "str" in _kinds(typing.get_args(annotation)[0]) else set()
    if origin is dict:
        return {"dict"} if "str" in _kinds(typing.get_args(annotation)[1]) else set()
    out: set[str] = set()
    for arg in typing.get_args(annotation):
        out |= _kinds(arg)
    return out


def _model(annotation: Any):
    """The section model a field holds; None for lists of models (their items: ITEM_FIELDS below)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is list:
        return None
    for arg in typing.get_args(annotation):
        found = _model(arg)
        if found is not None:
            return found
    return None


def string_fields(model: type[BaseModel] = Spec, prefix: tuple = ()) -> list[tuple[tuple, str]]:
    """(path, shape) for every field that holds user text: shape 'str', 'list' or 'dict'."""
    out = []
    for name, info in model.model_fields.items():
        sub = _model(info.annotation)
        if sub is not None:
            out += string_fields(sub, prefix + (name,))
            continue
        kinds = _kinds(info.annotation)
        if kinds:
            out.append((prefix + (name,), "str" if "str" in kinds else sorted(kinds)[0]))
    return out


def yaml_exact(text: str) -> str:
    """A double-quoted YAML scalar that reads back as exactly ``text`` (lone surrogates included)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def to_yaml(data: Any, indent: int = 0) -> str:
    """Block YAML for plain spec data, every string written with yaml_exact."""
    pad = " " * indent
    if isinstance(data, dict):
        lines = []
        for key, value in data.items():
            if isinstance(value, (dict, list)) and value:
                lines.append(f"{pad}{yaml_exact(str(key))}:\n{to_yaml(value, indent + 2)}")
            else:
                lines.append(f"{pad}{yaml_exact(str(key))}: {_scalar(value)}\n")
        return "".join(lines)
    if isinstance(data, list):
        return "".join(f"{pad}- {_scalar(item)}\n" for item in data)
    return _scalar(data)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return yaml_exact(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    return repr(value)


def set_path(data: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


# Fields inside list items (the walk above does not enter lists of models): a valid item per list and the
# string fields in it, so the property test can put any text into each of them.
ITEM_FIELDS = {
    ("cluster", "kuberay", "volumes"): ({"name": "models", "mount_path": "/models", "pvc": "models"},
                                        ("name", "mount_path", "host_path", "pvc")),
    ("cluster", "kuberay", "secret_env"): ({"env": "HF_TOKEN", "secret": "hf-token", "key": "token"},
                                           ("env", "secret", "key")),
}
