"""Load a spec file: YAML → typed ``Spec``, with every schema problem as a located diagnostic."""

from __future__ import annotations

import difflib
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ValidationError

from fp8spec.diagnostics import Diagnostic
from fp8spec.specfile.fields import nested_model
from fp8spec.specfile.model import Spec
from fp8spec.specfile.yaml_source import InputError, Positions, parse_yaml, read_text

__all__ = ["LoadedSpec", "InputError", "load_spec", "load_spec_text"]


@dataclass
class LoadedSpec:
    file: str
    spec: Optional[Spec]
    positions: Positions
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sha256: str = ""
    # when the schema refuses the spec: the parsed YAML, for the rules that do not depend on the refused fields
    # (fp8spec.rules.set_aside)
    raw: Any = None
    text: str = ""  # the file as read: the bundle ships it byte for byte (spec.yaml)

    def locate(self, dotted: str, prefer: str = "value") -> tuple[int, int]:
        return self.positions.locate(_split_path(dotted), prefer)


def _split_path(dotted: str) -> tuple:
    parts: list[Any] = []
    for piece in dotted.split(".") if dotted else []:
        parts.append(int(piece) if piece.isdigit() else piece)
    return tuple(parts)


def load_spec(path: str | Path, display: str | None = None) -> LoadedSpec:
    """Read and type-check a spec file. Raises InputError when it is not a readable YAML mapping."""
    path = Path(path)
    display = display or str(path)
    text = read_text(path, display)
    return load_spec_text(text, display)


def load_spec_text(text: str, display: str = "<spec>") -> LoadedSpec:
    data, positions = parse_yaml(text, display)
    loaded = LoadedSpec(
        display, None, positions, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), text=text
    )
    try:
        loaded.spec = Spec.model_validate(data)
    except ValidationError as exc:
        diags = [_schema_diagnostic(err, positions, display) for err in exc.errors()]
        loaded.diagnostics = sorted(_drop_union_noise(diags), key=Diagnostic.sort_key)
        loaded.raw = data
    return loaded


def _drop_union_noise(diags: list[Diagnostic]) -> list[Diagnostic]:
    """A value checked against a union (str or list) fails once per branch; keep the most specific message."""
    # a union's other branch failing on the whole value, when the items themselves are reported
    deeper = {d.path for d in diags}
    diags = [
        d
        for d in diags
        if "Input should be a valid" not in d.message or not any(p.startswith(d.path + ".") for p in deeper)
    ]
    by_place: dict[tuple, list[Diagnostic]] = {}
    for d in diags:
        by_place.setdefault((d.line, d.col, d.path), []).append(d)
    out = []
    for group in by_place.values():
        specific = [d for d in group if "Input should be a valid" not in d.message]
        out.extend(specific if specific and len(group) > 1 else group)
    return out


def _dotted(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


def _written_prefix(loc: tuple, positions: Positions) -> tuple:
    """Pydantic adds union/choice tags to locations ('train_files', 'list[str]', 0); keep the parts in the
    file (('train_files', 0): the item itself)."""
    best: tuple = ()
    for part in loc:
        if positions.has(best + (part,)):
            best = best + (part,)
    return best


def _schema_diagnostic(err: Mapping[str, Any], positions: Positions, display: str) -> Diagnostic:
    loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        line, col = positions.locate(loc, prefer="key")
        key = str(loc[-1]) if loc else "?"
        allowed = sorted(_allowed_keys(loc[:-1]))
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = (
            f"did you mean '{close[0]}'?"
            if close
            else (f"allowed keys here: {', '.join(allowed)}" if allowed else None)
        )
        where = _dotted(loc[:-1]) or "the top level"
        return Diagnostic(
            "error", "S001", f"unknown key '{key}' in {where}", display, line, col, _dotted(loc), hint
        )
    if kind == "missing" and loc and isinstance(loc[-1], int):
        line, col = positions.locate(loc[:-1], prefer="value")
        return Diagnostic(
            "error",
            "S002",
            f"{_dotted(loc[:-1])}: too few items (item {loc[-1]} is missing)",
            display,
            line,
            col,
            _dotted(loc[:-1]),
            "block_size takes two numbers, e.g. [128, 128]" if loc[-2:-1] == ("block_size",) else None,
        )
    if kind == "missing":
        parent = loc[:-1]
        line, col = positions.locate(parent, prefer="key") if parent else (1, 1)
        where = _dotted(parent) or "the spec"
        return Diagnostic(
            "error",
            "S003",
            f"missing required key '{loc[-1]}' in {where}",
            display,
            line,
            col,
            _dotted(loc),
            _missing_hint(loc),
        )
    written = _written_prefix(loc, positions)
    line, col = positions.locate(written or loc, prefer="value")
    value = err.get("input")
    written_text = positions.plain.get(tuple(written or loc)) if not isinstance(value, str) else None
    shown = written_text if written_text is not None else repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    message = err.get("msg", "invalid value").removeprefix("Value error, ")
    if isinstance(value, float) and not math.isfinite(value) and kind != "float_type":
        # a bound's message ("should be <= 1") would read as if .nan were a number on the wrong side of it
        message = "is not a number" if math.isnan(value) else "is infinite, not a number a setting can take"
    path = _dotted(written or loc)
    code = "S004" if loc == ("version",) else "S002"
    text = f"{path}: {message} (got {shown})" if path else f"{message} (got {shown})"
    hint = (
        _value_hint(loc)
        or _choice_hint(kind, value, err)
        or _quote_hint(kind, value, written or loc, written_text)
        or _type_hint(kind, value)
    )
    return Diagnostic("error", code, text, display, line, col, path, hint)


def _choice_hint(kind: str, value: Any, err: Mapping[str, Any]) -> Optional[str]:
    """'did you mean ...?' for a near miss of a field's choices: case (H100), '-' for '_' (per-step), a typo."""
    if kind != "literal_error" or not isinstance(value, str):
        return None
    choices = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
    folded = value.strip().lower().replace("-", "_")
    exact = [c for c in choices if c.lower().replace("-", "_") == folded]
    close = exact or difflib.get_close_matches(folded, choices, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def _quote_hint(kind: str, value: Any, loc: tuple, written: Optional[str]) -> Optional[str]:
    """A bare number or boolean where text is wanted (cuda: 12.9, a version): quote it as written."""
    if kind != "string_type" or not isinstance(value, (bool, int, float)) or written is None:
        return None
    quoted = '"' + written.replace("\\", "\\\\").replace('"', '\\"') + '"'
    key = loc[-1] if loc and isinstance(loc[-1], str) else None
    where = f"{key}: {quoted}" if key else quoted
    return f"quote it: {where} (unquoted, YAML reads {written} as a {_yaml_type(value)})"


def _yaml_type(value: Any) -> str:
    return "boolean" if isinstance(value, bool) else "number"


def _missing_hint(loc: tuple) -> Optional[str]:
    hints = {
        ("version",): "start the spec with 'version: 1'",
        ("hardware",): "add hardware: {gpu: h100, nodes: 1, gpus_per_node: 8, cuda: '12.9'}",
        ("hardware", "gpu"): "name the TARGET GPU, e.g. gpu: h200",
    }
    return hints.get(loc)


def _value_hint(loc: tuple) -> Optional[str]:
    if loc == ("name",):
        return "use lowercase letters, digits, '.', '_' and '-' (it names the bundle folder)"
    if loc == ("version",):
        return "this fp8spec reads spec version 1"
    return None


_YAML11_BOOLEANS = {"yes", "no", "on", "off", "y", "n"}
# YAML 1.1 integer spellings other than plain decimal: 0x10, 0o17 (and 1.1's 017), 0b101, 1_000, 190:20:30
_YAML11_INT = re.compile(
    r"[-+]?(0x[0-9a-fA-F_]+|0o?[0-7_]+|0b[01_]+|[0-9][0-9_]*_[0-9_]*|[1-9][0-9_]*(:[0-5]?[0-9])+)"
)


def _type_hint(kind: str, value: Any) -> Optional[str]:
    """How to write the value a strict field takes, for the usual slips (YAML 1.1 habits, quoting)."""
    if kind == "bool_type":
        if isinstance(value, str) and value.lower() in _YAML11_BOOLEANS:
            return "write true or false: YAML 1.1's yes/no/on/off are text in a spec (YAML 1.2), not booleans"
        return "write true or false"
    if kind in ("int_type", "float_type"):
        if isinstance(value, bool):
            return "a boolean is not a number: write the number"
        if isinstance(value, float) and kind == "int_type":
            return (
                f"write a whole number ({int(value)}, not {value!r})"
                if value.is_integer()
                else "write a whole number"
            )
        digits = value.strip().lstrip("+-") if isinstance(value, str) else ""
        if digits.isdigit() and digits.startswith("0"):
            return "write the number in decimal without leading zeros (YAML 1.1 reads 017 as octal 15)"
        if isinstance(value, str) and _YAML11_INT.fullmatch(value.strip()):
            try:
                decimal = f" {int(value.strip(), 0)}"
            except ValueError:
                decimal = ""
            return (
                f"write it as a plain decimal number{decimal}: YAML 1.1 and YAML 1.2 readers disagree on "
                f"{value.strip()} (hexadecimal, octal, binary and '_' spellings), so a spec takes decimals only"
            )
        if isinstance(value, str):
            return "write a plain number, without quotes"
    if kind == "string_type" and isinstance(value, (bool, int, float)):
        return "quote it: unquoted, YAML reads it as a number or a boolean"
    return None


def _allowed_keys(loc: tuple) -> set[str]:
    """Field names of the model section at ``loc`` (for did-you-mean)."""
    model: Any = Spec
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return set()
        info = model.model_fields.get(str(part))
        if info is None:
            return set()
        model = nested_model(info.annotation)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return set(model.model_fields)
    return set()
