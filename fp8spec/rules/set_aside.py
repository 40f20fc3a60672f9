"""The rule findings of a spec the schema refuses, where they do not depend on the refused fields.

One mistyped value (S002) or unknown key (S001) makes the spec untyped, and no rule could run until it was fixed.
Here each refused field is set aside (removed, so its default applies) and the rules run on the rest; but a
default can cause findings of its own, so the rules also run with the field at every value it could mean (each
choice of an enumerated field, both booleans, a number's bounds, the value written under an unknown key's
nearest known key) and only the findings every variant has are reported: those the refused field cannot change.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from fp8spec.diagnostics import Diagnostic

if TYPE_CHECKING:
    from fp8spec.specfile.loader import LoadedSpec

#: more variants than this and the check is skipped (each is a full rule run)
MAX_VARIANTS = 16
_MISSING = object()


def _field_info(path: tuple) -> Optional[Any]:
    """The pydantic FieldInfo of a spec path (None for a path the schema does not have)."""
    from pydantic import BaseModel

    from fp8spec.specfile.model import Spec

    model: Any = Spec
    info = None
    for part in path:
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = _model_of(info.annotation)
    return info


def _model_of(annotation: Any) -> Any:
    from pydantic import BaseModel

    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _values(info: Any) -> list[Any]:
    """Values a refused field could have meant: its choices, both booleans, or a number's bounds."""
    annotation = info.annotation
    args = [annotation, *typing.get_args(annotation)]
    out: list[Any] = []
    for arg in args:
        if typing.get_origin(arg) is typing.Literal:
            out.extend(typing.get_args(arg))
        elif arg is bool:
            out.extend([True, False])
    if out:
        return out
    for meta in info.metadata:
        for bound in ("ge", "gt", "le", "lt"):
            value = getattr(meta, bound, None)
            if isinstance(value, (int, float)):
                out.append(value)
    return out


def _get(data: Any, path: tuple) -> Any:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


def _set(data: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    if value is _MISSING:
        data.pop(path[-1], None)
    else:
        data[path[-1]] = value


def _refused(loaded) -> Optional[list[tuple[tuple, Optional[tuple], Any]]]:
    """(refused path, the known field it means or None, the value written) per refused field; None when a
    refusal is of another kind (a missing required key, a whole section of the wrong type)."""
    from fp8spec.specfile.loader import _split_path

    out: list[tuple[tuple, Optional[tuple], Any]] = []
    for d in loaded.diagnostics:
        if d.code not in ("S001", "S002") or not d.path:
            return None
        path = _split_path(d.path)
        if any(isinstance(p, int) for p in path):
            path = path[: next(i for i, p in enumerate(path) if isinstance(p, int))]
        written = _get(loaded.raw, path)
        if d.code == "S002":
            info = _field_info(path)
            if info is None or _model_of(info.annotation) is not info.annotation:
                return None  # a whole section refused: nothing to set aside safely
            out.append((path, path, written))
            continue
        parent = _field_info(path[:-1]) if len(path) > 1 else None
        known = list(_model_of(parent.annotation).model_fields) if parent is not None else []
        if len(path) == 1:
            from fp8spec.specfile.model import Spec

            known = list(Spec.model_fields)
        close = difflib.get_close_matches(str(path[-1]), known, n=1, cutoff=0.6)
        out.append((path, path[:-1] + (close[0],) if close else None, written))
    return out


def findings_beside(
    loaded: LoadedSpec, spec_dir: Path, validate: Callable[[LoadedSpec, Path], Any]
) -> list[Diagnostic]:
    """The rule diagnostics of a schema-refused spec that no value of its refused fields could change (empty
    when there is nothing safe to report). ``validate`` is the rule runner's (passed in: the runner calls this,
    so importing it here would make a cycle)."""
    from fp8spec.rules.registry import rule_hint
    from fp8spec.specfile.loader import _split_path

    if not isinstance(loaded.raw, dict):
        return []
    refused = _refused(loaded)
    if not refused:
        return []
    base = copy.deepcopy(loaded.raw)
    for path, _, _ in refused:
        _set(base, path, _MISSING)
    variants = [base]
    for path, meant, written in refused:
        if meant is None:
            continue
        info = _field_info(meant)
        if info is None:
            continue
        values = _values(info) + ([written] if meant != path else [])
        for value in values:
            variant = copy.deepcopy(base)
            _set(variant, meant, copy.deepcopy(value))
            variants.append(variant)
    if len(variants) > MAX_VARIANTS:
        return []
    from fp8spec.specfile.model import Spec

    runs = []
    for data in variants:
        try:
            spec = Spec.model_validate(data)
        except Exception:  # noqa: BLE001 - a value the field cannot take (or a required one removed): not a variant
            continue
        one = dataclasses.replace(loaded, spec=spec, diagnostics=[], raw=None)
        runs.append(validate(one, spec_dir).diagnostics)
    if not runs:
        return []
    keys = [{(d.code, d.path, d.severity) for d in run} for run in runs]
    common = set.intersection(*keys)
    # a hint's values were checked with the refused field at one value: kept only where every variant prints it
    hints = [{(d.code, d.path, d.severity): d.hint for d in run} for run in runs]
    set_aside = ", ".join(".".join(str(p) for p in path) for path, _, _ in refused)
    of = "it" if len(refused) == 1 else "them"
    out = []
    for d in runs[0]:
        if (d.code, d.path, d.severity) not in common or d.code.startswith("S"):
            continue
        near = any(
            _split_path(d.path)[: len(path)] == path or (meant and _split_path(d.path)[: len(meant)] == meant)
            for path, meant, _ in refused
        )
        if near:
            continue  # about the refused field itself: its schema error says it
        key = (d.code, d.path, d.severity)
        hint = d.hint if all(h.get(key) == d.hint for h in hints) else rule_hint(d.code)
        out.append(
            dataclasses.replace(
                d,
                message=f"{d.message} (found with {set_aside} set aside: no value of {of} changes this)",
                hint=hint,
            )
        )
    return out
