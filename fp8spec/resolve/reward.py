"""The custom reward function file: read once, offline, so validation and the bundle see the same bytes.

The file is copied into the bundle under a fixed name and verl loads it relative to the Ray working_dir
(the bundle folder), so the bundle runs without the user's tree on the cluster.

One bounded read of a regular file (fp8spec.bounded_read: a FIFO swapped in is refused, not waited on; a
file that grows past the limit while it is read is refused, never shipped cut): what was checked is what
ships. The source is decoded as Python decodes it (a UTF-8 byte order mark, a PEP 263 coding cookie) and
shipped as UTF-8, its cookie saying so, so verl imports the same text.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fp8spec.bounded_read import ReadError, read_regular
from fp8spec.specfile.model import Spec
from fp8spec.specfile.paths import PathError, local_path

BUNDLE_NAME = "custom_reward.py"
MAX_BYTES = 1 << 20  # a reward function, not a package: 1 MiB is plenty and keeps the bundle small


@dataclass(frozen=True)
class RewardFile:
    source: Path  # where it was read on this machine
    text: str
    function: str


@dataclass(frozen=True)
class RewardFileProblem:
    message: str
    path: str  # the spec field to point at


def load_reward_file(spec: Spec, spec_dir: Path) -> tuple[Optional[RewardFile], Optional[RewardFileProblem]]:
    custom = spec.reward.custom_function
    if custom is None:
        return None, None
    where = "reward.custom_function.path"
    try:
        path = local_path(custom.path, spec_dir)
    except PathError as err:
        return None, RewardFileProblem(str(err), where)
    if path.suffix != ".py":
        return None, RewardFileProblem(f"{custom.path} is not a Python file (.py)", where)
    try:
        raw = read_regular(path, MAX_BYTES, "reward file")
    except ReadError as err:
        return None, RewardFileProblem(f"{path}: {err}", where)
    try:
        text = _python_source(raw)
    except (SyntaxError, LookupError) as err:  # not UTF-8 and no (known) coding cookie: Python refuses it too
        return None, RewardFileProblem(
            f"{path} is not UTF-8 text and declares no encoding Python reads ({err})", where
        )
    except UnicodeDecodeError as err:
        return None, RewardFileProblem(f"{path} is not UTF-8 text (byte {err.start})", where)
    if "\x00" in text:  # Python refuses it without a line number
        line = text.count("\n", 0, text.index("\x00")) + 1
        return None, RewardFileProblem(
            f"{path}:{line}: a NUL byte: Python refuses source code holding one", where
        )
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as err:
        why = err.msg
        if "sys.set_int_max_str_digits" in why:  # Python's own remedy is not the spec author's
            why = "an integer literal over Python's 4300-digit limit: verl could not import the file"
        at = f"{err.lineno}:" if err.lineno is not None else ""
        return None, RewardFileProblem(f"{path}:{at} Python syntax error: {why}", where)
    except (RecursionError, MemoryError):  # what CPython's own compiler raises on it too
        return None, RewardFileProblem(
            f"{path}: an expression nested too deeply for Python to compile; verl could not import it", where
        )
    bindings = _top_level_bindings(tree)
    if custom.name not in bindings:
        return None, RewardFileProblem(
            f"{path} defines no top-level {custom.name!r} for verl to load", "reward.custom_function.name"
        )
    value = bindings[custom.name]
    if value is not None and _never_callable(value):
        return None, RewardFileProblem(
            f"{path}:{value.lineno}: {custom.name!r} is bound to a {type(value).__name__} value, not a function "
            "verl can call",
            "reward.custom_function.name",
        )
    return RewardFile(path, text, custom.name), None


_COOKIE = re.compile(r"^([ \t\f]*#.*?coding[:=][ \t]*)([-\w.]+)", re.MULTILINE)


def _python_source(raw: bytes) -> str:
    """The text Python reads from these bytes (BOM and coding cookie honoured), with the cookie of the first
    two lines rewritten to utf-8: the bundle's copy is UTF-8 and must be read as such."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    text = raw.decode(encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    head, sep, rest = text.partition("\n")
    second, sep2, rest2 = rest.partition("\n")
    if encoding not in ("utf-8", "utf-8-sig"):
        head = _COOKIE.sub(r"\1utf-8", head, count=1)
        second = _COOKIE.sub(r"\1utf-8", second, count=1)
    return head + sep + second + sep2 + rest2


# Expressions whose value can never be called: literals, containers, comprehensions, and arithmetic or
# comparisons made only of them (ast.walk is iterative: a deep expression cannot overflow the stack here).
_VALUE_NODES = (
    ast.Constant,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)
_OPERATOR_NODES = (
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
)


def _never_callable(value: ast.expr) -> bool:
    if isinstance(value, _VALUE_NODES[1:]):
        return True  # a container or string is not callable, whatever it holds
    return all(isinstance(n, _VALUE_NODES + _OPERATOR_NODES + (ast.expr_context,)) for n in ast.walk(value))


def _top_level_bindings(tree: ast.Module) -> dict[str, Optional[ast.expr]]:
    """Module-level name -> the expression last assigned to it (None for a def, class or import).
    verl does getattr(module, name) after executing the file: any module-level binding counts."""
    names: dict[str, Optional[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node.value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names[(a.asname or a.name).split(".")[0]] = None
    return names
