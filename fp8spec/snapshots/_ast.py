"""Small, dependency-free helpers for reading Python source statically (``ast`` only).

Nothing here imports the package being read: every value comes from the syntax tree, so the
extractors run on a 2-core CPU box without the engines' pinned CUDA stacks.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Iterable, Iterator, overload

_NO_VALUE = object()


def parse(source: str, filename: str = "<source>") -> ast.Module:
    return ast.parse(source, filename=filename)


@overload
def unparse(node: ast.AST) -> str: ...
@overload
def unparse(node: None) -> None: ...
@overload
def unparse(node: ast.AST | None) -> str | None: ...
def unparse(node: ast.AST | None) -> str | None:
    """``ast.unparse`` with the output made identical across Python 3.10-3.13 (3.10 writes ``lambda :``)."""
    if node is None:
        return None
    return _LAMBDA_SPACE.sub("lambda:", ast.unparse(node))


_LAMBDA_SPACE = re.compile(r"\blambda :")


def literal(node: ast.AST | None, default: Any = _NO_VALUE) -> Any:
    """``ast.literal_eval`` on a node; ``default`` (or raise ValueError) when it is not a literal."""
    if node is None:
        if default is _NO_VALUE:
            raise ValueError("no node")
        return default
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        if default is _NO_VALUE:
            raise ValueError(f"not a literal: {unparse(node)}") from None
        return default
    return jsonable(value, default)


def jsonable(value: Any, default: Any = _NO_VALUE) -> Any:
    """Map literal values onto JSON types (tuples and sets become lists; sets sorted)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v, default) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, default) for v in value]
        return sorted(items, key=repr)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out[str(k)] = jsonable(v, default)
        return out
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if default is _NO_VALUE:
        raise ValueError(f"not JSON-able: {value!r}")
    return default


def module_assignments(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level ``NAME = value`` and ``NAME: T = value`` (last one wins), including under
    ``if``/``try`` blocks at module level."""
    out: dict[str, ast.AST] = {}
    for stmt in _flat_module_body(tree.body):
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.TypeAlias) if hasattr(ast, "TypeAlias") else False:  # py3.12 `type X = ...`
            out[stmt.name.id] = stmt.value  # type: ignore[attr-defined]
    return out


def _flat_module_body(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    for stmt in body:
        if isinstance(stmt, (ast.If, ast.Try)):
            yield from _flat_module_body(stmt.body)
            yield from _flat_module_body(getattr(stmt, "orelse", []))
            if isinstance(stmt, ast.Try):
                for handler in stmt.handlers:
                    yield from _flat_module_body(handler.body)
        else:
            yield stmt


def find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for stmt in _flat_module_body(tree.body):
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return stmt
    return None


def classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [s for s in _flat_module_body(tree.body) if isinstance(s, ast.ClassDef)]


def base_names(cls: ast.ClassDef) -> list[str]:
    out = []
    for b in cls.bases:
        if isinstance(b, ast.Name):
            out.append(b.id)
        elif isinstance(b, ast.Attribute):
            out.append(b.attr)
        elif isinstance(b, ast.Subscript):
            out.append(unparse(b.value).split(".")[-1])
    return out


def decorator_names(cls: ast.ClassDef | ast.FunctionDef) -> list[str]:
    out = []
    for d in cls.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        out.append(unparse(target).split(".")[-1])
    return out


def is_classvar(annotation: ast.AST) -> bool:
    text = unparse(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar", "Final", "typing.Final")) or text in (
        "ClassVar",
        "Final",
    )


def string_annotation(annotation: ast.AST) -> ast.AST:
    """Turn ``"dict[str, Any] | None"`` (a quoted annotation) into its expression node."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return annotation
    return annotation


def union_members(annotation: ast.AST) -> list[ast.AST]:
    """Flatten ``A | B``, ``Optional[A]``, ``Union[A, B]`` and ``Annotated[A, ...]`` into members."""
    annotation = string_annotation(annotation)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return union_members(annotation.left) + union_members(annotation.right)
    if isinstance(annotation, ast.Subscript):
        head = unparse(annotation.value).split(".")[-1]
        inner = annotation.slice
        elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        if head == "Optional":
            return union_members(elts[0]) + [ast.Constant(value=None)]
        if head == "Union":
            out: list[ast.AST] = []
            for e in elts:
                out.extend(union_members(e))
            return out
        if head in ("Annotated", "A"):
            return union_members(elts[0])
    return [annotation]


def member_name(node: ast.AST) -> str:
    """``int`` / ``None`` / ``Literal`` / ``list`` / ``QuantizationConfigArgs`` for a union member."""
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    if isinstance(node, ast.Subscript):
        return unparse(node.value).split(".")[-1]
    return unparse(node).split(".")[-1]


def literal_values(node: ast.AST, aliases: dict[str, list[Any]] | None = None) -> list[Any] | None:
    """Values of ``Literal["a", "b"]`` (or of a name bound to such a Literal in ``aliases``)."""
    node = string_annotation(node)
    if isinstance(node, ast.Subscript) and member_name(node) == "Literal":
        inner = node.slice
        elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        values = []
        for e in elts:
            v = literal(e, _NO_VALUE_SENTINEL)
            if v is _NO_VALUE_SENTINEL:
                return None
            values.append(v)
        return values
    if aliases is not None and isinstance(node, (ast.Name, ast.Attribute)):
        return aliases.get(unparse(node).split(".")[-1])
    return None


_NO_VALUE_SENTINEL = object()


def literal_aliases(tree: ast.Module) -> dict[str, list[Any]]:
    """Module-level ``Name = Literal[...]`` aliases."""
    out = {}
    for name, value in module_assignments(tree).items():
        vals = literal_values(value)
        if vals is not None:
            out[name] = vals
    return out


def field_call_default(value: ast.AST | None) -> tuple[ast.AST | None, dict[str, Any]]:
    """For ``x: T = field(default=..., ...)`` / ``Field(...)`` / ``msgspec.field(...)`` return the node
    giving the default and extra facts (``default_factory``, ``init``, ``metadata``)."""
    extra: dict[str, Any] = {}
    if isinstance(value, ast.Call):
        fname = unparse(value.func).split(".")[-1]
        if fname in ("field", "Field"):
            kws = {k.arg: k.value for k in value.keywords if k.arg}
            if "init" in kws:
                extra["init"] = literal(kws["init"], None)
            if "metadata" in kws:
                extra["metadata"] = kws["metadata"]
            if "default" in kws:
                return kws["default"], extra
            if fname == "Field" and value.args:
                return value.args[0], extra
            if "default_factory" in kws:
                extra["default_factory"] = unparse(kws["default_factory"])
                factory = kws["default_factory"]
                fac = unparse(factory)
                if fac in ("list", "dict", "set", "tuple"):
                    return ast.parse(f"{fac}()", mode="eval").body, extra
                if isinstance(factory, ast.Lambda):
                    return factory.body, extra
                return None, extra
            return None, extra
    return value, extra


def default_value(node: ast.AST | None) -> Any:
    """Literal value of a default node; ``list()``/``dict()`` calls count as ``[]``/``{}``."""
    if node is None:
        return _NO_VALUE_SENTINEL
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        fname = unparse(node.func)
        if fname in ("list", "tuple", "set"):
            return []
        if fname == "dict":
            return {}
    return literal(node, _NO_VALUE_SENTINEL)


MISSING = _NO_VALUE_SENTINEL


def class_fields(cls: ast.ClassDef) -> list[dict[str, Any]]:
    """Annotated class-body fields in declaration order: name, annotation, default expr and value."""
    out = []
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if is_classvar(stmt.annotation):
            continue
        entry: dict[str, Any] = {"name": name, "annotation": unparse(stmt.annotation)}
        if stmt.value is None:
            entry["required"] = True
        else:
            node, extra = field_call_default(stmt.value)
            entry["default"] = unparse(stmt.value)
            value = default_value(node)
            if value is not MISSING:
                entry["default_value"] = value
            if extra.get("init") is False:
                entry["init"] = False
            entry["_default_node"] = node
            entry["_extra"] = extra
        entry["_annotation_node"] = stmt.annotation
        out.append(entry)
    return out


def public(entry: dict[str, Any]) -> dict[str, Any]:
    """Drop the private ``_``-prefixed working keys of an entry."""
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def calls_named(node: ast.AST, attr: str) -> Iterator[ast.Call]:
    """Every ``<anything>.attr(...)`` call under ``node`` in source order."""
    found = [
        c
        for c in ast.walk(node)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == attr
    ]
    found.sort(key=lambda c: (c.lineno, c.col_offset))
    return iter(found)


def getenv_calls(node: ast.AST) -> Iterator[tuple[str, ast.AST | None, ast.Call]]:
    """``os.getenv("X", d)``, ``os.environ.get("X", d)``, ``os.environ["X"]`` with a literal name."""
    for c in ast.walk(node):
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute):
            func = unparse(c.func)
            if func in ("os.getenv", "os.environ.get", "environ.get", "getenv") and c.args:
                name = literal(c.args[0], None)
                if isinstance(name, str):
                    yield name, (c.args[1] if len(c.args) > 1 else None), c


def add_argument_calls(node: ast.AST) -> Iterator[tuple[list[str], dict[str, ast.AST], str]]:
    """Each ``add_argument(...)`` under ``node`` with string option spellings, as (options, keyword nodes,
    dest); dest is the literal ``dest=`` or argparse's own derivation from the first long option."""
    for call in calls_named(node, "add_argument"):
        options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not options:
            continue
        kws: dict[str, ast.AST] = {k.arg: k.value for k in call.keywords if k.arg}
        dest = literal(kws["dest"], None) if "dest" in kws else None
        if dest is None:
            longs = [o for o in options if o.startswith("--")]
            dest = (longs[0] if longs else options[0]).lstrip("-").replace("-", "_")
        yield options, kws, dest
