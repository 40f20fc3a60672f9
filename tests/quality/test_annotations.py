"""Every public function of the package is fully annotated: each parameter (bar ``self``/``cls``) and the return.

Public: the name does not start with ``_``, and it is defined at module level (also under a module-level
``if``/``try``, e.g. ``if TYPE_CHECKING:``) or in a public class (nested public classes too). mypy checks the
bodies (``check_untyped_defs``); this test makes the signatures say what they take and give, so the checks at
the call sites mean something. Rule checks registered with ``@rule`` take ``ctx: ResolvedSpec`` and return
``Iterator[Finding]``, the shape the rule engine calls.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "fp8spec"
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _missing(fn: FunctionNode, method: bool) -> list[str]:
    """Names of the parts of ``fn``'s signature without an annotation ('return' for the return type)."""
    a = fn.args
    params = [*a.posonlyargs, *a.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if method and not static and params:
        params = params[1:]  # self / cls
    missing = [p.arg for p in [*params, *a.kwonlyargs] if p.annotation is None]
    if a.vararg is not None and a.vararg.annotation is None:
        missing.append("*" + a.vararg.arg)
    if a.kwarg is not None and a.kwarg.annotation is None:
        missing.append("**" + a.kwarg.arg)
    if fn.returns is None:
        missing.append("return")
    return missing


def _public_functions(body: list[ast.stmt], method: bool = False):
    """(node, is_method) for every public function in ``body``, descending into public classes and
    module-level ``if``/``try`` blocks (not into functions: what they define is not public)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_"):
                yield node, method
        elif isinstance(node, ast.ClassDef):
            if not node.name.startswith("_"):
                yield from _public_functions(node.body, method=True)
        elif isinstance(node, ast.If):
            yield from _public_functions(node.body + node.orelse, method)
        elif isinstance(node, ast.Try):
            handlers = [s for h in node.handlers for s in h.body]
            yield from _public_functions(node.body + handlers + node.orelse + node.finalbody, method)


def unannotated(path: Path) -> list[str]:
    """'file:line name (missing: ...)' for each public function of ``path`` that is not fully annotated."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out = []
    for fn, method in _public_functions(tree.body):
        missing = _missing(fn, method)
        if missing:
            out.append(f"{where}:{fn.lineno} {fn.name} (missing: {', '.join(missing)})")
    return out


def rule_signature_problems(path: Path) -> list[str]:
    """'file:line name: ...' for each ``@rule`` check whose signature is not (ctx: ResolvedSpec) ->
    Iterator[Finding]."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(
            isinstance(d, ast.Call) and getattr(d.func, "id", None) == "rule" for d in node.decorator_list
        ):
            continue
        params = [ast.unparse(p.annotation) if p.annotation else None for p in node.args.args]
        returns = ast.unparse(node.returns) if node.returns else None
        if params != ["ResolvedSpec"] or returns != "Iterator[Finding]":
            out.append(f"{where}:{node.lineno} {node.name}: ({', '.join(map(str, params))}) -> {returns}")
    return out


def test_every_public_function_is_annotated():
    problems = [p for path in sorted(PACKAGE.rglob("*.py")) for p in unannotated(path)]
    assert not problems, "public functions not fully annotated:\n" + "\n".join(problems)


def test_rule_checks_take_the_resolved_spec_and_yield_findings():
    paths = sorted((PACKAGE / "rules").glob("*.py")) + sorted(set(PACKAGE.rglob("rules.py")))
    checks = sum(
        1
        for path in paths
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and any(isinstance(d, ast.Call) for d in node.decorator_list)
    )
    assert checks > 50  # the scan sees the registered rules (a renamed decorator would make it vacuous)
    problems = [p for path in paths for p in rule_signature_problems(path)]
    assert not problems, "rule checks with another signature:\n" + "\n".join(problems)


BAD = textwrap.dedent(
    """
    from typing import TYPE_CHECKING, Iterator

    from fp8spec.rules.registry import rule

    def no_return(x: int):
        return x

    def no_param(x, y: int = 0) -> int:
        return y

    async def star_args(*args, **kwargs) -> None:
        pass

    def good(x: int, *args: int, key: str = "", **kw: str) -> int:
        return x

    def _private(x):
        return x

    if TYPE_CHECKING:
        def under_if(x) -> int:
            return 0

    class Public:
        def __init__(self, x):
            self.x = x

        def method(self, y) -> int:
            return y

        @classmethod
        def build(cls) -> "Public":
            return cls(1)

        @staticmethod
        def helper(z) -> int:
            return z

        def _hidden(self, y):
            return y

        class Inner:
            def deep(self):
                pass

    class _Private:
        def method(self, y):
            return y

    def outer() -> None:
        def inner(x):
            return x

    @rule("X001", "x", "error", "s", "r", "h")
    def loose_check(ctx) -> Iterator[int]:
        yield 1

    @rule("X002", "x", "error", "s", "r", "h")
    def good_check(ctx: ResolvedSpec) -> Iterator[Finding]:
        yield from ()
    """
)


def test_the_checks_have_teeth(tmp_path):
    """Both scans report exactly the bad definitions of a sample file, each with its line."""
    bad = tmp_path / "bad.py"
    bad.write_text(BAD, encoding="utf-8")
    assert unannotated(bad) == [
        f"{bad}:6 no_return (missing: return)",
        f"{bad}:9 no_param (missing: x)",
        f"{bad}:12 star_args (missing: *args, **kwargs)",
        f"{bad}:22 under_if (missing: x)",
        f"{bad}:29 method (missing: y)",
        f"{bad}:37 helper (missing: z)",
        f"{bad}:44 deep (missing: return)",
        f"{bad}:56 loose_check (missing: ctx)",
    ]
    assert rule_signature_problems(bad) == [f"{bad}:56 loose_check: (None) -> Iterator[int]"]
