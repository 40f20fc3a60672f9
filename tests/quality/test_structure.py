"""The shape to keep (docs/architecture in the design notes): small modules, and imports that flow one way.

- No module of the package is over 500 lines.
- No import cycle, except the one the rule registry makes on purpose: ``fp8spec.rules.registry`` imports every
  rule module (fp8spec/rules/*.py, and a topic folder's rules.py: exclusions, megatron) so that importing it
  registers all rules, and each rule module imports the registry's ``@rule`` decorator. Imports under
  ``if TYPE_CHECKING:`` never run and are not counted; imports inside functions run when called and are counted.
- The runtime patch set imports nothing from fp8spec outside ``fp8spec.runtime`` (a bundle ships only it).
- No rollout engine's name is compared outside the engines' folders (fp8spec/engines/, fp8spec/runtime/kv_scales/):
  rules, compiler and planner ask the engine object.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO
from tests.quality.scratch import scratch_source

PACKAGE = REPO / "fp8spec"
MAX_LINES = 500
REGISTRY = "fp8spec.rules.registry"


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of import nodes under ``if TYPE_CHECKING:``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    return skip


def import_graph(type_checking: bool = False, package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from pkg import sub`` counts as importing ``pkg.sub``).

    Imports under ``if TYPE_CHECKING:`` count only with ``type_checking=True`` (the layer order counts them: a type
    hint that points up is still an arrow up; the run-time cycle check does not)."""
    mods = _modules(package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        skip = set() if type_checking else _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                while target and target not in mods:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_import_cycle_outside_the_rule_registry():
    graph = import_graph()
    rule_modules = {m for m in graph if m.startswith("fp8spec.rules.") or m.endswith(".rules")}
    graph[REGISTRY] -= rule_modules  # the registry loads the rule modules on purpose (see above)
    assert cycles(graph) == []


def test_the_cycle_check_has_teeth():
    graph = import_graph()
    assert REGISTRY in graph["fp8spec.rules.kv_cache"]  # a real edge is seen
    # with the registry's loading imports kept, its cycle is found
    assert any(REGISTRY in c for c in cycles(graph))
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_writer_does_not_import_the_bundle():
    """Writing a bundle (staging, locking, swapping folders) knows nothing of what a bundle holds."""
    graph = import_graph()
    seen, todo = set(), ["fp8spec.compiler.writer"]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    assert "fp8spec.compiler.owned" in seen  # the walk sees the writer's own imports
    assert not {m for m in seen if m in ("fp8spec.compiler.bundle", "fp8spec.compiler.settings")}


def test_runtime_imports_only_itself():
    graph = import_graph()
    runtime = {m for m in graph if m == "fp8spec.runtime" or m.startswith("fp8spec.runtime.")}
    outside = {m: sorted(t for t in graph[m] if t not in runtime and t != "fp8spec") for m in runtime}
    assert {m: t for m, t in outside.items() if t} == {}


# an expression that is an engine's name: ctx.engine, ctx.engine.name, setup.engine, rollout_name, spec.rollout.engine
ENGINE_REFERENCE = re.compile(r"(\bengine|\.engine|\bengine\.name|\brollout_name|\brollout\.engine)$")


def engine_name_comparisons(path: Path, engines: tuple[str, ...]) -> list[str]:
    """``==`` / ``!=`` with an engine's name on one side, or an engine named by its literal name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare) or not any(isinstance(o, (ast.Eq, ast.NotEq)) for o in node.ops):
            continue
        sides = [node.left, *node.comparators]
        named = any(isinstance(s, ast.Constant) and s.value in engines for s in sides)
        if named or any(ENGINE_REFERENCE.search(ast.unparse(s)) for s in sides if not isinstance(s, ast.Constant)):
            out.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_engine_name_is_compared_outside_the_engines_folders():
    from fp8spec.engines import engine_names

    folders = {PACKAGE / "engines", PACKAGE / "runtime" / "kv_scales"}
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if not any(f in p.parents for f in folders)]
    # In the runtime 'vllm' is also a value of FP8SPEC_KV_SCALE_DIVISORS (vLLM's divisors), not an engine: there
    # only comparisons of an engine reference count.
    found = [c for p in paths
             for c in engine_name_comparisons(p, () if PACKAGE / "runtime" in p.parents else engine_names())]
    assert found == []


def test_the_engine_comparison_check_has_teeth(tmp_path):
    with scratch_source(
        tmp_path,
        "if ctx.engine.name == 'x': pass\nif setup.engine != 'y': pass\nif other == 'vllm': pass\n"
        "if s.layer == 'engine_arg': pass\n",
    ) as bad:
        assert len(engine_name_comparisons(bad, ("vllm",))) == 3
