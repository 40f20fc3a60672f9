"""Read a spec file into plain Python data plus a map from spec paths to line/column.

Everything a user can put in a file ends as a located ``InputError`` (exit code 2), never a traceback or a
hang: only a regular file is read, at most ``MAX_SPEC_BYTES`` of it whatever its size claims (a FIFO,
/dev/zero or /dev/urandom is refused before a byte is read); refused characters (``fp8spec.specfile.text``:
controls, NEL, U+2028/U+2029, bidi and other format characters) are reported where they stand, since
YAML readers disagree about them; nesting deeper than ``MAX_DEPTH`` is refused while scanning, before the
parser gets to it (the YAML parser's cost grows with the square of the depth); more than ``MAX_NODES``
values stop the read. Also refused: tabs in indentation, YAML syntax errors (at the line and column where
the problem starts), duplicate keys, merge keys (``<<``), anchors/aliases (alias bombs), explicit tags,
``%YAML`` directives other than 1.2, several documents, an empty file or a non-mapping.

Plain scalars follow the YAML 1.2 core schema for booleans (``true``/``True``/``TRUE``, ``false``/...), null
(``null``/``~``/nothing) and decimal numbers. Forms YAML 1.1 reads as another boolean or number stay text:
``yes``/``no``/``on``/``off``, ``017`` (octal in 1.1), ``0x10``, ``0o17``, ``1_000``, ``1:20``, and dates; the
strict spec model then refuses text where a field wants a boolean or a number, with a hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    DocumentStartEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from ruamel.yaml.scanner import Scanner

from fp8spec.bounded_read import ReadError, read_regular
from fp8spec.diagnostics import Diagnostic
from fp8spec.specfile.text import FILE_WHITESPACE, describe, first_refused

MAX_SPEC_BYTES = 64 * 1024  # example specs are ~2 KiB; the YAML parser reads ~150 KiB/s on a slow core
MAX_DEPTH = 32  # a spec nests 4 deep
MAX_NODES = 5_000  # keys, values and list items together; a spec has a few hundred at most
MAX_NUMBER_DIGITS = 100

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
    # the source text of unquoted scalars (12.10 reads as the number 12.1; messages show what was written)
    plain: dict[PathKey, str] = field(default_factory=dict)

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


def _error(
    file: str, code: str, message: str, line: int = 1, col: int = 1, hint: str | None = None
) -> InputError:
    return InputError(Diagnostic("error", code, message, file, line, col, "", hint))


# --- reading the file -------------------------------------------------------------------------------------


def read_bytes(path: Path, display: str) -> bytes:
    """At most MAX_SPEC_BYTES of a regular file (fp8spec.bounded_read); a located E001 otherwise."""
    try:
        return read_regular(path, MAX_SPEC_BYTES, "spec file")
    except ReadError as err:
        hint = "a spec is a few KiB; is this the right file?" if "larger than the limit" in str(err) else None
        message = "is a directory, not a spec file" if str(err) == "is a directory" else str(err)
        raise _error(display, "E001", message, hint=hint) from None


def read_text(path: Path, display: str) -> str:
    raw = read_bytes(path, display)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise _error(
            display,
            "E002",
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded",
            line,
            col,
            "save the spec as UTF-8",
        ) from None


# --- characters ---------------------------------------------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def line_col(text: str, index: int) -> tuple[int, int]:
    """1-based line and column (in characters) of ``text[index]``, counting line breaks as YAML does."""
    line, start = 1, 0
    for match in _LINE_BREAK.finditer(text, 0, index):
        line, start = line + 1, match.end()
    return line, index - start + 1


def _check_characters(text: str, display: str) -> None:
    index = first_refused(text, FILE_WHITESPACE)
    if index is None:
        return
    ch = text[index]
    line, col = line_col(text, index)
    if ch in "\x85\u2028\u2029":
        why = "YAML 1.1 readers end a line there and YAML 1.2 readers do not"
    elif ch == "\ufeff":
        why = "a byte order mark belongs only at the very start of a file"
    elif ch == "\x00":
        why = "a NUL byte: is this a text file?"
    else:
        why = "invisible and control characters can make a spec read differently from how it looks"
    raise _error(
        display,
        "E008",
        f"character {describe(ch)} is not allowed in a spec file: {why}",
        line,
        col,
        "delete it (a spec's values never need it)",
    )


# --- scanning and parsing -----------------------------------------------------------------------------------


class _TooDeep(Exception):
    def __init__(self, mark):
        super().__init__("too deep")
        self.mark = mark


class _YamlDirective(Exception):
    def __init__(self, mark):
        super().__init__("%YAML directive")
        self.mark = mark


class _GuardedScanner(Scanner):
    """ruamel's scanner, refusing flow nesting beyond MAX_DEPTH before it costs anything, and a ``%YAML``
    directive other than 1.2 where it stands (ruamel's parser asserts on versions it does not know, 1.10 say)."""

    def scan_directive(self) -> Any:
        token = super().scan_directive()
        if token.name == "YAML" and token.value != (1, 2):
            raise _YamlDirective(token.start_mark)
        return token

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _TooDeep(self.reader.get_mark())
        super().fetch_flow_collection_start(TokenClass, to_push)


def _position(mark) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1)


_OPENERS = {
    "while scanning a quoted scalar": "a quoted string",
    "while parsing a flow sequence": "a '['",
    "while parsing a flow mapping": "a '{'",
}


def _syntax_error(err: MarkedYAMLError, text: str, display: str) -> InputError:
    problem = err.problem or err.context or "invalid YAML"
    mark = err.problem_mark or err.context_mark
    opener = _OPENERS.get(str(err.context or ""))
    # An unclosed quote or bracket is found at the end of the file or far below; the place to fix is where
    # it opened.
    if opener and err.context_mark is not None and err.problem_mark is not None:
        found = _position(err.problem_mark)
        mark = err.context_mark
        if "end of stream" in str(problem) or "<stream end>" in str(problem):
            problem = f"{opener} opened here is never closed"
        else:
            problem = (
                f"{opener} opened here is not closed where expected ({problem} at line {found[0]}, "
                f"column {found[1]})"
            )
        line, col = _position(mark)
        return _error(display, "E003", f"YAML syntax error: {problem}", line, col)
    line, col = _position(mark) if mark is not None else (1, 1)
    lines = text.splitlines()
    if 0 < line <= len(lines) and "\t" in lines[line - 1][: max(col, 1)] or "'\\t'" in str(problem):
        return _error(
            display,
            "E003",
            "tab character in indentation; YAML indents with spaces",
            line,
            col,
            "replace the tab with spaces",
        )
    return _error(display, "E003", f"YAML syntax error: {problem}", line, col)


def _events(text: str, display: str):
    yaml = YAML(typ="safe", pure=True)
    yaml.Scanner = _GuardedScanner
    try:
        yield from yaml.parse(text)
    except _TooDeep as deep:
        line, col = _position(deep.mark)
        raise _error(
            display,
            "E010",
            f"nested more than {MAX_DEPTH} levels deep",
            line,
            col,
            "a spec nests a few levels; is this the right file?",
        ) from None
    except _YamlDirective as directive:
        line, col = _position(directive.mark)
        raise _error(
            display, "E003", "%YAML directives are not allowed: a spec is YAML 1.2", line, col
        ) from None
    except MarkedYAMLError as err:
        raise _syntax_error(err, text, display) from None
    except (YAMLError, RecursionError, ValueError) as err:
        raise _error(display, "E003", f"YAML error: {type(err).__name__}: {err}") from None


# --- typing scalars (YAML 1.2 core schema, minus what YAML 1.1 reads differently) ---------------------------

_NULLS = ("", "~", "null", "Null", "NULL")
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")
_SPECIAL_FLOATS = {
    f"{sign}.{word}": float(f"{sign}inf") for sign in ("", "+", "-") for word in ("inf", "Inf", "INF")
}
_SPECIAL_FLOATS.update({f".{word}": float("nan") for word in ("nan", "NaN", "NAN")})


def _scalar(event: ScalarEvent, display: str) -> Any:
    value = event.value
    if event.style is not None:  # quoted or block scalar: always text
        return value
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    if _INT.fullmatch(value) or _FLOAT.fullmatch(value):
        if sum(ch.isdigit() for ch in value) > MAX_NUMBER_DIGITS:
            line, col = _position(event.start_mark)
            raise _error(display, "E010", f"a number with more than {MAX_NUMBER_DIGITS} digits", line, col)
        return int(value) if _INT.fullmatch(value) else float(value)
    if value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    return value


# --- building plain data with positions ---------------------------------------------------------------------


@dataclass
class _Frame:
    path: PathKey
    out: Any  # dict or list
    key: Optional[str] = None  # a mapping's key waiting for its value
    first_seen: dict = field(default_factory=dict)  # key -> line where it was first written


class _Builder:
    def __init__(self, display: str):
        self.display = display
        self.positions = Positions()
        self.stack: list[_Frame] = []
        self.documents: list[tuple[Any, tuple[int, int]]] = []
        self.nodes = 0

    def fail(self, code: str, message: str, mark, hint: str | None = None) -> InputError:
        line, col = _position(mark)
        return _error(self.display, code, message, line, col, hint)

    def feed(self, event) -> None:
        if isinstance(event, DocumentStartEvent):  # a %YAML directive other than 1.2: refused by the scanner
            return
        if isinstance(event, CollectionEndEvent):
            self.stack.pop()
            return
        if isinstance(event, AliasEvent) or (
            getattr(event, "anchor", None)
            and isinstance(event, (ScalarEvent, MappingStartEvent, SequenceStartEvent))
        ):
            raise self.fail(
                "E005",
                "YAML anchors and aliases are not allowed in a spec",
                event.start_mark,
                "write the value out in full",
            )
        if not isinstance(event, (ScalarEvent, MappingStartEvent, SequenceStartEvent)):
            return
        if event.tag:
            raise self.fail(
                "E007",
                f"YAML tags ({event.tag}) are not allowed in a spec",
                event.start_mark,
                "remove the tag; write plain values",
            )
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(
                "E010",
                f"more than {MAX_NODES} keys and values",
                event.start_mark,
                "a spec has a few dozen; is this the right file?",
            )
        top = self.stack[-1] if self.stack else None
        if top is not None and isinstance(top.out, dict) and top.key is None:
            self.key(top, event)
            return
        if top is None:
            path: PathKey = ()
        elif isinstance(top.out, dict):
            path = top.path + (top.key,)
        else:
            path = top.path + (len(top.out),)
        if path:
            self.positions.values[path] = _position(event.start_mark)
        if isinstance(event, ScalarEvent):
            if event.style is None and path:
                self.positions.plain[path] = event.value
            self.attach(top, _scalar(event, self.display), event)
            return
        container: Any = {} if isinstance(event, MappingStartEvent) else []
        self.attach(top, container, event)
        if len(self.stack) >= MAX_DEPTH:
            raise self.fail(
                "E010",
                f"nested more than {MAX_DEPTH} levels deep",
                event.start_mark,
                "a spec nests a few levels; is this the right file?",
            )
        self.stack.append(_Frame(path, container))

    def key(self, frame: _Frame, event) -> None:
        if not isinstance(event, ScalarEvent):
            raise self.fail(
                "E006", "mapping keys must be plain scalars, not lists or mappings", event.start_mark
            )
        name = event.value
        if event.style is None and name == "<<":
            raise self.fail(
                "E009",
                "YAML merge keys ('<<') are not allowed in a spec",
                event.start_mark,
                "write the keys out in full",
            )
        if event.style is None and name in _NULLS:
            raise self.fail("E006", "a mapping key is empty or null", event.start_mark)
        line, _ = _position(event.start_mark)
        if name in frame.first_seen:
            first = frame.first_seen[name]
            raise self.fail(
                "E004",
                f"duplicate key '{name}' (first written on line {first})",
                event.start_mark,
                "each key may appear once in a mapping",
            )
        frame.first_seen[name] = line
        frame.key = name
        self.positions.keys[frame.path + (name,)] = _position(event.start_mark)

    def attach(self, top: Optional[_Frame], value: Any, event) -> None:
        if top is None:
            self.documents.append((value, _position(event.start_mark)))
        elif isinstance(top.out, dict):
            top.out[top.key] = value
            top.key = None
        else:
            top.out.append(value)


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def parse_yaml(text: str, display: str) -> tuple[dict, Positions]:
    """Parse spec text into plain dict/list/scalars plus their positions."""
    if text.startswith("\ufeff"):  # a byte order mark at the very start is how some editors save UTF-8
        text = text[1:]
    _check_characters(text, display)
    builder = _Builder(display)
    for event in _events(text, display):
        builder.feed(event)
    docs = [(root, where) for root, where in builder.documents if root is not None]
    if not docs:
        raise _error(
            display, "E006", "empty spec: expected a mapping with version, name, model, hardware, data"
        )
    if len(docs) > 1:
        raise _error(display, "E006", "several YAML documents in one spec file; keep one", *docs[1][1])
    root, (line, col) = docs[0]
    if not isinstance(root, dict):
        raise _error(display, "E006", f"the spec must be a mapping, not {_type_name(root)}", line, col)
    return root, builder.positions
