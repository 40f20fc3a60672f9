"""The layer order (docs/layers.md), checked: each layer imports only from layers at or below it, with no
exceptions.

Low to high::

    foundation    the package's small shared helpers (bounded_read, safe_write, quoting, stack.yaml's reader, ...)
    descriptors   engines/, trainers/, launchers/: names and capabilities as data
    spec          specfile, catalog, profiles, snapshots, targets: the spec format (its choices come from the
                  descriptors), model facts, backend facts
    resolve       spec + model facts + profiles = the resolved spec
    plan          memory / KV / gain numbers (an engine's memory model is plan-layer code)
    rules         one module per topic (an engine's or a topic folder's rules.py too)
    compiler      settings plan -> bundle files (adapters, launch scripts); report: a finished run -> verdicts
    cli           commands

``fp8spec.runtime`` is a separate leaf checked by test_structure (it imports nothing else from fp8spec); it sits in
the foundation here because the compiler reads its manifest and environment names.

Every import counts: under ``if TYPE_CHECKING:`` too (a type hint that points up is still an arrow up), and inside
functions. Every module must match a row of LAYER_OF (longest prefix wins), so a new module is placed on purpose.
"""

from __future__ import annotations

from tests.quality.test_structure import import_graph

ORDER = ("foundation", "descriptors", "spec", "resolve", "plan", "rules", "compiler", "cli")

# module prefix -> layer; the longest matching prefix wins
LAYER_OF: dict[str, str] = {
    "fp8spec": "foundation",  # the package itself and its small shared helpers (bounded_read, safe_write, ...)
    "fp8spec.runtime": "foundation",
    "fp8spec.preflight": "foundation",  # the self-contained program every launcher runs first
    "fp8spec.exclusions.name_match": "foundation",
    "fp8spec.engines": "descriptors",
    "fp8spec.trainers": "descriptors",
    "fp8spec.launchers": "descriptors",
    "fp8spec.specfile": "spec",
    "fp8spec.catalog": "spec",
    "fp8spec.profiles": "spec",
    "fp8spec.snapshots": "spec",
    "fp8spec.targets": "spec",
    "fp8spec.trainers.megatron.config_check": "spec",
    "fp8spec.trainers.megatron.snapshot": "spec",
    "fp8spec.engines.vllm.snapshot": "spec",
    "fp8spec.engines.sglang.snapshot": "spec",
    "fp8spec.trainers.megatron.layout": "resolve",  # the layout with its resolved defaults (ResolvedSpec.megatron)
    "fp8spec.resolve": "resolve",
    "fp8spec.exclusions": "resolve",
    "fp8spec.plan": "plan",
    "fp8spec.engines.vllm.memory": "plan",
    "fp8spec.engines.sglang.memory": "plan",
    "fp8spec.rules": "rules",
    "fp8spec.exclusions.rules": "rules",
    "fp8spec.trainers.megatron.rules": "rules",
    "fp8spec.engines.vllm.rules": "rules",
    "fp8spec.engines.sglang.rules": "rules",
    "fp8spec.compiler": "compiler",
    "fp8spec.report": "compiler",
    "fp8spec.trainers.megatron.adapter": "compiler",
    "fp8spec.engines.common": "compiler",
    "fp8spec.engines.vllm.adapter": "compiler",
    "fp8spec.engines.sglang.adapter": "compiler",
    "fp8spec.launchers.argv": "compiler",
    "fp8spec.launchers.launch": "compiler",
    "fp8spec.launchers.ray": "compiler",
    "fp8spec.launchers.slurm": "compiler",
    "fp8spec.launchers.kuberay": "compiler",
    "fp8spec.launchers.preflight": "compiler",
    "fp8spec.cli": "cli",  # cli, cli_backends, cli_init, ... (prefix of the module name, not of a package)
    "fp8spec.completion": "cli",
    "fp8spec.starter": "cli",
}


def layer_of(module: str) -> str:
    # "fp8spec.cli" also covers the cli_* modules beside it
    rows = [
        p
        for p in LAYER_OF
        if module == p or module.startswith((p + ".", p + "_" if p == "fp8spec.cli" else "."))
    ]
    best = max(rows, key=len, default=None)
    assert best is not None, f"{module} has no layer: add a row to LAYER_OF"
    return LAYER_OF[best]


def up_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    return sorted(
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if ORDER.index(layer_of(t)) > ORDER.index(layer_of(m))
    )


def test_every_module_has_a_layer():
    assert {m: layer_of(m) for m in import_graph()}  # layer_of asserts on a module no row covers


def test_no_import_goes_up_the_layers():
    """No exceptions: a part that needs a higher layer lives in that layer (an engine's memory model, a launcher's
    renderer), and a lower layer that must reach one is handed it (the rules' view of a plan it prints)."""
    found = up_edges(import_graph(type_checking=True))
    assert found == [], "imports up the layer order:\n" + "\n".join(f"{a} -> {b}" for a, b in found)


def test_the_layer_check_has_teeth(tmp_path):
    package = tmp_path / "fp8spec"
    (package / "compiler").mkdir(parents=True)
    for name in ("__init__.py", "compiler/__init__.py", "compiler/build.py", "catalog.py"):
        (package / name).write_text("", encoding="utf-8")
    (package / "hardware.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fp8spec.compiler import build\n",
        encoding="utf-8",
    )
    (package / "targets.py").write_text("def f():\n    from .compiler.build import x\n", encoding="utf-8")
    (package / "specfile.py").write_text("from fp8spec import catalog\n", encoding="utf-8")
    graph = import_graph(type_checking=True, package=package)
    # a TYPE_CHECKING-only import and an in-function import are both arrows up; a sideways one is not
    assert up_edges(graph) == [
        ("fp8spec.hardware", "fp8spec.compiler.build"),
        ("fp8spec.targets", "fp8spec.compiler.build"),
    ]
    assert up_edges(import_graph(package=package)) == [("fp8spec.targets", "fp8spec.compiler.build")]
    # a synthetic arrow up (the spec format importing the compiler) is caught, one sideways and one down are not
    synthetic = {
        "fp8spec.specfile.model": {"fp8spec.compiler.build", "fp8spec.catalog"},
        "fp8spec.cli": {"fp8spec.specfile.model"},
    }
    assert up_edges(synthetic) == [("fp8spec.specfile.model", "fp8spec.compiler.build")]
    # a descriptor is data below the spec format: the spec reads it, it never reads the spec
    assert up_edges({"fp8spec.specfile.stack": {"fp8spec.engines"}, "fp8spec.engines.base": {"fp8spec.specfile"}}) == [
        ("fp8spec.engines.base", "fp8spec.specfile")
    ]
    assert layer_of("fp8spec.cli_plan") == "cli" and layer_of("fp8spec.engines.vllm.memory") == "plan"
