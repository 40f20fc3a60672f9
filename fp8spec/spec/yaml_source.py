"""Read a spec file into plain Python data plus a map from spec paths to line/column.

Everything a user can put in a file ends as a located ``InputError`` (exit code 2), never a traceback:
missing files, folders, non-UTF-8 bytes, tabs, YAML syntax, duplicate keys, anchors/aliases (a spec
needs none, and refusing them defuses alias bombs), explicit tags, several documents, an empty file or a non-mapping.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent

from fp8spec.diagnostics import Diagnostic

MAX_SPEC_BYTES = 1 << 20

PathKey = tuple  # e.g. ("rollout", "tp") or ("linear", "exclude", 2)


class InputError(Exception):
    """The file cannot be read as a YAML mapping; carries one located diagnostic."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.render())
        self.diagnostic = diagnostic


@dataclass
class Positions:
    """1-based (line, col) of each key and value, by spec path."""

    keys: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    values: dict[PathKey, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: PathKey, prefer: str = "value") -> tuple[int, int]:
        """Position of ``path``, or of its nearest written ancestor; (1, 1) when nothing is written."""
        path = tuple(path)
        while path:
            primary = self.values if prefer == "value" else self.keys
            for table in (primary, self.keys, self.values):
                if path in table:
                    return table[path]
            path = path[:-1]
        return (1, 1)

    def has(self, path: PathKey) -> bool:
        return tuple(path) in self.keys or tuple(path) in self.values


def _error(file: str, code: str, message: str, line: int = 1, col: int = 1, hint: str | None = None) -> InputError:
    return InputError(Diagnostic("error", code, message, file, line, col, "", hint))


def read_text(path: Path, display: str) -> str:
    try:
        if not path.exists():
            raise _error(display, "E001", "spec file not found")
        if path.is_dir():
            raise _error(display, "E001", "is a directory, not a spec file")
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise _error(display, "E001", f"spec file is {size} bytes; the limit is {MAX_SPEC_BYTES}")
        raw = path.read_bytes()
    except OSError as exc:
        raise _error(display, "E001", f"cannot read spec file: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        raise _error(
            display, "E002", f"not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded", line, col,
            "save the spec as UTF-8",
        ) from None


def _mark_position(err: MarkedYAMLError) -> tuple[int, int]:
    mark = err.problem_mark or err.context_mark
    if mark is None:
        return (1, 1)
    return (mark.line + 1, mark.column + 1)


def _reject_aliases(text: str, display: str) -> None:
    try:
        for event in YAML().parse(text):
            anchor = getattr(event, "anchor", None)
            if isinstance(event, AliasEvent) or (
                anchor and isinstance(event, (ScalarEvent, CollectionStartEvent))
            ):
                mark = event.start_mark
                raise _error(
                    display, "E005", "YAML anchors and aliases are not allowed in a spec",
                    mark.line + 1, mark.column + 1, "write the value out in full",
                )
            if getattr(event, "tag", None) and isinstance(event, (ScalarEvent, CollectionStartEvent)):
                mark = event.start_mark
                raise _error(
                    display, "E007", f"YAML tags ({event.tag}) are not allowed in a spec",
                    mark.line + 1, mark.column + 1, "remove the tag; write plain values",
                )
    except MarkedYAMLError as err:
        raise _syntax_error(err, text, display) from None
    except YAMLError as err:
        raise _error(display, "E003", f"YAML error: {err}") from None


def _syntax_error(err: MarkedYAMLError, text: str, display: str) -> InputError:
    line, col = _mark_position(err)
    problem = err.problem or err.context or "invalid YAML"
    lines = text.splitlines()
    if 0 < line <= len(lines) and "\t" in lines[line - 1][: max(col, 1)] or "'\\t'" in str(problem):
        return _error(display, "E003", "tab character in indentation; YAML indents with spaces", line, col,
                      "replace the tab with spaces")
    return _error(display, "E003", f"YAML syntax error: {problem}", line, col)


def parse_yaml(text: str, display: str) -> tuple[dict, Positions]:
    """Parse spec text into plain dict/list/scalars plus their positions."""
    _reject_aliases(text, display)
    loader = YAML(typ="rt")
    loader.allow_duplicate_keys = False
    try:
        docs = list(loader.load_all(text))
    except DuplicateKeyError as err:
        line, col = _mark_position(err)
        raise _error(display, "E004", f"duplicate key: {err.problem}", line, col,
                     "each key may appear once in a mapping") from None
    except MarkedYAMLError as err:
        raise _syntax_error(err, text, display) from None
    except (YAMLError, RecursionError, ValueError) as err:
        raise _error(display, "E003", f"YAML error: {type(err).__name__}: {err}") from None
    docs = [d for d in docs if d is not None]
    if not docs:
        raise _error(display, "E006", "empty spec: expected a mapping with version, name, model, hardware, data")
    if len(docs) > 1:
        raise _error(display, "E006", "several YAML documents in one spec file; keep one")
    root = docs[0]
    if not isinstance(root, CommentedMap):
        raise _error(display, "E006", f"the spec must be a mapping, not {_type_name(root)}")
    positions = Positions()
    data = _plain(root, (), positions, display)
    return data, positions


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _plain(node: Any, path: PathKey, positions: Positions, display: str) -> Any:
    if isinstance(node, CommentedMap):
        out = {}
        for key in node:
            kline, kcol = node.lc.key(key)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise _error(display, "E006", "mapping keys must be plain scalars", kline + 1, kcol + 1)
            name = str(key) if not isinstance(key, bool) else str(key).lower()
            child = path + (name,)
            positions.keys[child] = (kline + 1, kcol + 1)
            vline, vcol = node.lc.value(key)
            positions.values[child] = (vline + 1, vcol + 1)
            out[name] = _plain(node[key], child, positions, display)
        return out
    if isinstance(node, CommentedSeq):
        out_list = []
        for index, item in enumerate(node):
            child = path + (index,)
            line, col = node.lc.item(index)
            positions.values[child] = (line + 1, col + 1)
            out_list.append(_plain(item, child, positions, display))
        return out_list
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        return node.isoformat()
    return str(node)
