"""Adding a rollout engine is one new folder plus data.

A copy of the package and its data gets exactly that: fp8spec/engines/toy/ (tests/engines/toy_engine.py: its
descriptor, a memory model, an adapter with one setting and a standalone server, one rule), backends/toy/1.0.0.yaml and a line in
backends/stack.yaml. Nothing else is edited. The real CLI, run from the copy, then knows the engine everywhere the
registry feeds: the spec's choices and stack fields, the backends, retargeting, the rules (its own among them),
the planner, and the compiler, which writes a trainer bundle and a serve bundle for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import REPO, SPECS, patched
from tests.engines.toy_engine import ENGINE_ADAPTER, ENGINE_INIT, ENGINE_MEMORY, ENGINE_RULES, PROFILE
from tests.extending import cli_in, copy_of_the_package, package_file_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The package and its data (as a source checkout lays them out), plus the toy engine's folder and data."""
    root = copy_of_the_package(tmp_path_factory.mktemp("with-toy"))
    engine = root / "fp8spec" / "engines" / "toy"
    engine.mkdir()
    (engine / "__init__.py").write_text(ENGINE_INIT, encoding="utf-8")
    (engine / "memory.py").write_text(ENGINE_MEMORY, encoding="utf-8")
    (engine / "adapter.py").write_text(ENGINE_ADAPTER, encoding="utf-8")
    (engine / "rules.py").write_text(ENGINE_RULES, encoding="utf-8")
    (root / "backends" / "toy").mkdir()
    (root / "backends" / "toy" / "1.0.0.yaml").write_text(PROFILE, encoding="utf-8")
    with open(root / "backends" / "stack.yaml", "a", encoding="utf-8") as fh:
        fh.write('toy: "1.0.0"\n')
    return root


fp8spec = cli_in


def test_the_copy_runs_its_own_package(tree):
    assert package_file_of(tree) == str(tree / "fp8spec" / "__init__.py")


def test_the_spec_knows_the_engine(tree):
    schema = json.loads(fp8spec(tree, "schema").stdout)
    props = schema["$defs"]
    assert "toy" in props["RolloutSection"]["properties"]["engine"]["enum"]
    assert props["StackSection"]["properties"]["toy"]["description"].startswith("Toy release")
    help_text = fp8spec(tree, "compile", "--help").stdout
    assert "fsdp+toy" in help_text and "megatron+toy" in help_text


def test_its_rule_is_listed_and_explained(tree):
    listing = fp8spec(tree, "rules").stdout
    assert "TOY001" in listing and "toy-serves-bf16-only" in listing
    explained = fp8spec(tree, "rules", "TOY001")
    assert explained.returncode == 0 and "loads BF16 weights only" in explained.stdout
    assert 'Fires (the message says "cannot run FP8 linears"):\n  rollout:\n    engine: toy\n' in explained.stdout


def test_its_rule_examples_hold(tree, tmp_path):
    """The examples the rule carries (as `fp8spec rules TOY001 -f json` gives them) fire and pass for real."""
    examples = json.loads(fp8spec(tree, "rules", "TOY001", "-f", "json").stdout)["examples"]
    base = YAML(typ="safe").load((tree / examples["base"]).read_text(encoding="utf-8"))
    for name, fragment, fires in [("bad", examples["bad"], True)] + [("good", g, False) for g in examples["good"]]:
        spec = tmp_path / f"{name}.yaml"
        with open(spec, "w", encoding="utf-8") as fh:
            YAML().dump(patched(base, fragment), fh)
        out = json.loads(fp8spec(tree, "validate", str(spec), "--format", "json").stdout)
        found = [d for d in out["files"][0]["diagnostics"] if d["code"] == "TOY001"]
        assert bool(found) == fires, (name, found)
        assert not fires or examples["message"] in found[0]["message"]


def test_its_rule_fires_for_it_and_only_for_it(tree):
    fp8 = str(tree / "specs" / "qwen3-8b.yaml")  # FP8 linears
    on_toy = fp8spec(tree, "validate", fp8, "--backend", "fsdp+toy", "--format", "json")
    codes = {d["code"] for d in json.loads(on_toy.stdout)["files"][0]["diagnostics"]}
    assert "TOY001" in codes, on_toy.stdout
    on_vllm = fp8spec(tree, "validate", fp8, "--format", "json")
    assert on_vllm.returncode == 0, on_vllm.stdout
    assert "TOY001" not in {d["code"] for d in json.loads(on_vllm.stdout)["files"][0]["diagnostics"]}


def test_a_trainer_bundle_and_a_serve_bundle_compile_for_it(tree, tmp_path):
    spec = str(tree / "specs" / "tiny-qwen3-h200-bf16.yaml")  # BF16: the toy engine's rule is quiet
    clean = fp8spec(tree, "validate", spec, "--backend", "fsdp+toy")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    proc = fp8spec(tree, "compile", spec, "--backend", "fsdp+toy", "-o", str(tmp_path / "trainer"))
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "trainer" / "tiny-qwen3-h200-bf16"
    overrides = YAML(typ="safe").load((bundle / "overrides.yaml").read_text(encoding="utf-8"))
    assert "actor_rollout_ref.rollout.name='toy'" in overrides
    env = YAML(typ="safe").load((bundle / "runtime_env.yaml").read_text(encoding="utf-8"))["env_vars"]
    assert env["TOY_FAST_PATH"] == "1"  # its one setting, named by its profile
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["backend"] == "fsdp+toy" and manifest["profiles"]["toy"]["version"] == "1.0.0"
    assert manifest["retargeted_from"] == "fsdp+vllm"
    preflight = json.loads((bundle / "preflight.json").read_text(encoding="utf-8"))
    assert {"name": "toy", "version": "1.0.0", "distributions": ["toy-engine"]} in preflight["packages"]
    readme = (bundle / "README.md").read_text(encoding="utf-8")
    assert "TOY001 toy-serves-bf16-only: passed" in readme and "toy pool" in readme  # its rule and memory model

    proc = fp8spec(tree, "compile", spec, "--backend", "toy", "-o", str(tmp_path / "serve"))
    assert proc.returncode == 0, proc.stderr
    argv = json.loads((tmp_path / "serve" / "tiny-qwen3-h200-bf16" / "engine_args.json").read_text())["argv"]
    assert argv == ["toy", "serve", "/tmp/fp8spec-rl/model", "--tp", "1"]


def test_the_planner_uses_its_memory_model(tree, tmp_path):
    spec = tmp_path / "toy.yaml"
    data = YAML(typ="safe").load((SPECS / "tiny-qwen3-h200-bf16.yaml").read_text(encoding="utf-8"))
    data["rollout"]["engine"] = "toy"
    data["model"]["config_path"] = str(SPECS / data["model"]["config_path"])
    data["reward"]["custom_function"]["path"] = str(SPECS / data["reward"]["custom_function"]["path"])
    with open(spec, "w", encoding="utf-8") as fh:
        YAML().dump(data, fh)
    proc = fp8spec(tree, "plan", str(spec), "-f", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["engine"]["engine"] == "toy" and plan["engine"]["version"] == "1.0.0"
    assert plan["sources"]["engine_memory_model"] == "backends/toy memory.* facts"
    assert plan["rollout"][0]["kv_cache"]["block_size"]["value"] == 16


def test_the_real_tree_has_no_toy_engine():
    from fp8spec.engines import engine_names

    assert "toy" not in engine_names() and not (REPO / "backends" / "toy").exists()
