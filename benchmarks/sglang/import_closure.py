"""Static import closure of Python packages unpacked from wheels (nothing is imported or run).

    python -m benchmarks.sglang.import_closure --site DIR ENTRY.MODULE ... [--lazy-in PREFIX] [--why NAME]

Follows every import at module level (including those under module-level ``if``), starting from the entry
modules, through the modules found under ``--site`` (wheels unpacked side by side). An import inside a ``try``
whose handlers catch ImportError/ModuleNotFoundError/Exception (or a bare except) is *soft*: it is followed, but
a missing target is reported separately, not as a requirement; so is one under a module-level ``if`` (platform
branches), and ``if TYPE_CHECKING`` blocks are skipped. Imports inside functions are *lazy*: not
followed; ``--lazy-in PREFIX`` lists those in modules under PREFIX that name modules outside the site (what a
call may import later, to read by hand). Prints the top-level names outside ``--site`` reached by hard imports
(what the image must provide), each with one import chain, then the soft misses.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from pathlib import Path


class Sites:
    """Folders searched in order, as sys.path is (a namespace package may span several)."""

    def __init__(self, roots: list[Path]):
        self.roots = roots

    def module_file(self, name: str) -> Path | None:
        """The file that defines module ``name`` (an extension module counts: it has no imports to follow)."""
        parts = name.split(".")
        for root in self.roots:
            base = root.joinpath(*parts)
            if (base / "__init__.py").exists():
                return base / "__init__.py"
            if base.with_suffix(".py").exists():
                return base.with_suffix(".py")
            if base.parent.is_dir() and any(base.parent.glob(f"{base.name}.*.so")):
                return sorted(base.parent.glob(f"{base.name}.*.so"))[0]
        return None

    def is_package_dir(self, name: str) -> bool:
        return any(root.joinpath(*name.split(".")).is_dir() for root in self.roots)

    def has_top(self, top: str) -> bool:
        return self.module_file(top) is not None or self.is_package_dir(top)

    def rel(self, path: Path) -> str:
        for root in self.roots:
            if path.is_relative_to(root):
                return str(path.relative_to(root))
        return str(path)


# What a module-level ``if`` test means on the H200 (CUDA 13, sm90, Linux x86-64): identifiers that contain one of
# these words are taken as known. Anything else is unknown (both branches followed, reported as conditional).
FALSE_WORDS = ("hip", "rocm", "npu", "mps", "mlx", "aiter", "xpu", "musa", "hpu", "habana", "gfx", "cpu_",
               "is_cpu", "_cpu", "sm100", "sm120", "blackwell", "darwin", "apple", "macos", "cuda12", "ascend")
TRUE_WORDS = ("cuda", "sm90", "hopper", "flashinfer_available", "nvidia", "linux")


def platform_value(node: ast.expr) -> bool | None:
    if isinstance(node, ast.BoolOp):
        vals = [platform_value(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in vals else (True if all(v is True for v in vals) else None)
        return True if True in vals else (False if all(v is False for v in vals) else None)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = platform_value(node.operand)
        return None if v is None else not v
    if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Compare)):
        text = ast.unparse(node).lower()
        if any(w in text for w in FALSE_WORDS):
            return False
        if any(w in text for w in TRUE_WORDS):
            return True
    return None


def _catches_import_error(node: ast.Try) -> bool:
    for h in node.handlers:
        if h.type is None:
            return True
        names = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
        for n in names:
            if isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception",
                                                     "BaseException", "OSError", "RuntimeError"):
                return True
    return False


a_platform = [True]  # --no-platform turns the evaluator off


def imports_of(path: Path, modname: str, is_pkg: bool):
    """Yield (target, kind, lineno) with kind in hard/soft/lazy; targets are absolute dotted names."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    pkg = modname if is_pkg else modname.rpartition(".")[0]

    def resolve(node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = pkg.split(".")
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(body, kind):
        for node in body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield a.name, kind, node.lineno
            elif isinstance(node, ast.ImportFrom):
                mod = resolve(node)
                for a in node.names:
                    # "from pkg import sub" may name a submodule: record both, the caller keeps what exists
                    yield f"{mod}.{a.name}" if a.name != "*" else mod, kind + "?", node.lineno
                yield mod, kind, node.lineno
            elif isinstance(node, ast.Try):
                soft = "soft" if _catches_import_error(node) else kind
                yield from visit(node.body, soft if kind == "hard" else kind)
                for h in node.handlers:
                    yield from visit(h.body, kind)
                yield from visit(node.orelse, kind)
                yield from visit(node.finalbody, kind)
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" in test:
                    continue  # annotations only
                # a module-level branch (platform checks: is_cuda(), is_hip(), ...): followed, but a target
                # outside the site is reported apart, to be judged by hand for the H200 (CUDA) path
                value = platform_value(node.test) if a_platform[0] else None
                sub = "cond" if kind == "hard" else kind
                if value is not False:
                    yield from visit(node.body, kind if value is True else sub)
                if value is not True:
                    yield from visit(node.orelse, kind if value is False else sub)
            elif isinstance(node, ast.With):
                yield from visit(node.body, kind)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from visit(node.body, "lazy")
            elif isinstance(node, ast.ClassDef):
                yield from visit(node.body, kind)
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                        yield from visit(getattr(child, "body", []) if isinstance(child.body, list) else [],
                                         "lazy")

    yield from visit(tree.body, "hard")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", required=True, type=Path, action="append", help="repeatable; searched in order")
    ap.add_argument("--lazy-in", action="append", default=[])
    ap.add_argument("--why", action="append", default=[], help="print the chain to this module")
    ap.add_argument("--dump", type=Path, help="write every reached module with its strength to this file")
    ap.add_argument("--no-platform", action="store_true", help="follow both branches of every module-level if")
    ap.add_argument("entries", nargs="+")
    a = ap.parse_args()
    site = Sites(a.site)
    parent: dict[str, str | None] = {}
    queue: deque[str] = deque()
    external: dict[str, str] = {}
    soft_missing: dict[str, str] = {}
    cond_missing: dict[str, str] = {}
    lazy: dict[str, set[str]] = {}
    a_platform[0] = not a.no_platform
    strength: dict[str, str] = {}
    for e in a.entries:
        parent[e] = None
        strength[e] = "hard"
        queue.append(e)
    rank = {"hard": 0, "cond": 1, "soft": 2}
    weaker = lambda x, y: x if rank[x] >= rank[y] else y  # noqa: E731 - the weaker of two edge kinds

    def reach(target: str, how: str, via: str) -> None:
        if target not in strength or rank[how] < rank[strength[target]]:
            strength[target] = how
            parent[target] = via
            queue.append(target)

    while queue:
        mod = queue.popleft()
        mine = strength[mod]
        parts = mod.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a and a.b first
            anc = ".".join(parts[:i])
            if site.module_file(anc):
                reach(anc, mine, mod)
        path = site.module_file(mod)
        if path is None or path.suffix == ".so":
            continue
        is_pkg = path.name == "__init__.py"
        for target, kind, line in imports_of(path, mod, is_pkg):
            optional_sub = kind.endswith("?")
            kind = kind.rstrip("?")
            top = target.split(".")[0]
            if not target or kind == "lazy":
                if kind == "lazy" and not optional_sub and not site.has_top(top) and top not in sys.stdlib_module_names \
                        and any(mod.startswith(p) for p in a.lazy_in):
                    lazy.setdefault(top, set()).add(f"{site.rel(path)}:{line}")
                continue
            how = weaker(kind, mine)
            if site.module_file(target) or site.is_package_dir(target):
                reach(target, how, f"{mod}:{line}")
            elif optional_sub:
                continue  # a name imported from a module, not a submodule
            elif not site.has_top(top) and top not in sys.stdlib_module_names:
                where = f"{site.rel(path)}:{line}"
                bucket = {"hard": external, "cond": cond_missing, "soft": soft_missing}[how]
                bucket.setdefault(top, where)

    def chain(name: str) -> str:
        out, cur = [], name
        while cur is not None and len(out) < 40:
            out.append(cur)
            p = parent.get(cur)
            cur = p.split(":")[0] if p else None
        return " <- ".join(out)

    hard_n = sum(1 for v in strength.values() if v == "hard")
    print(f"# {len(parent)} modules reached from {', '.join(a.entries)} ({hard_n} unconditionally)")
    if a.dump:
        a.dump.write_text("".join(f"{m}\t{strength[m]}\n" for m in sorted(strength)), encoding="utf-8")
    tops: dict[str, str] = {}
    for m, how in strength.items():
        t = m.split(".")[0]
        if t not in tops or rank[how] < rank[tops[t]]:
            tops[t] = how
    print("## top-level packages inside the site that are reached (hard / cond / soft)")
    for how in ("hard", "cond", "soft"):
        print(f"{how}: {' '.join(sorted(t for t, h in tops.items() if h == how))}")
    print("## hard imports outside the site (the image must provide these)")
    for top in sorted(external):
        print(f"{top}\t{external[top]}")
    print("## conditional imports outside the site (under a module-level if: judge the CUDA branch by hand)")
    for top in sorted(cond_missing):
        if top not in external:
            print(f"{top}\t{cond_missing[top]}")
    print("## soft imports outside the site (inside try/except: optional)")
    for top in sorted(soft_missing):
        if top not in external and top not in cond_missing:
            print(f"{top}\t{soft_missing[top]}")
    if a.lazy_in:
        print("## lazy imports outside the site (inside functions; read by hand)")
        for top in sorted(lazy):
            if top not in external:
                print(f"{top}\t{', '.join(sorted(lazy[top])[:4])}")
    for name in a.why:
        print(f"## why {name} ({strength.get(name, '-')}): {chain(name) if name in parent else 'not reached'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
