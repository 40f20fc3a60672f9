"""The real-size RL specs (benchmarks/rl_real/): generated from one base spec, strict-clean, compiled, and planned
to fit; plan_predictions.json is what `fp8spec plan` says now."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO
from tests.rl_real.conftest import SPECS

HERE = REPO / "benchmarks/rl_real"


def _run(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _flat(node, prefix=""):
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def test_specs_are_base_plus_their_fields_and_nothing_else():
    assert [p.name for p in SPECS] == sorted(f"real-{s}-{v}.yaml" for s in ("4b-h200", "8b-h200x2")
                                             for v in ("bf16", "fp8", "fp8kv"))
    assert _run(str(HERE / "make_specs.py"), "--check").returncode == 0
    table = YAML(typ="safe").load((HERE / "variants.yaml").read_text(encoding="utf-8"))
    specs = {p.stem: _flat(YAML(typ="safe").load(p.read_text(encoding="utf-8"))) for p in SPECS}
    for set_name in table["sets"]:
        bf16, fp8, fp8kv = (specs[f"real-{set_name}-{v}"] for v in ("bf16", "fp8", "fp8kv"))
        differ = lambda a, b: sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))  # noqa: E731
        name_only = ["name", "trainer.checkpoint_dir"]
        assert differ(bf16, fp8) == sorted([*name_only, "linear.quantize", "linear.deep_gemm",
                                            *[k for k in bf16 if k.startswith("acknowledge.")]])
        assert differ(fp8, fp8kv) == sorted([*name_only, "kv_cache.dtype", "kv_cache.recalibrate"])
        assert fp8kv["correction.method"] == fp8["correction.method"] == "tis" and fp8kv["correction.clip"] == 2.0
        # a real rollout workload: >= 128 sequences per step, responses of at least 2K tokens
        assert bf16["algorithm.train_batch_size"] * bf16["rollout.n"] >= 128
        assert bf16["rollout.max_response_length"] >= 2048


def test_model_configs_are_the_catalogs_shapes():
    from benchmarks.common.models import catalog_config

    for folder, model_id in (("qwen3-4b", "Qwen/Qwen3-4B"), ("qwen3-8b", "Qwen/Qwen3-8B-Base")):
        config = json.loads((HERE / "models" / folder / "config.json").read_text(encoding="utf-8"))
        assert config == catalog_config(model_id)
        assert config["vocab_size"] == 151936


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_validates_strict_and_compiles(spec, bundles):
    proc = run_cli_here("validate", "--strict", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (bundles / spec.stem / "launch.sh").is_file() and (bundles / spec.stem / "overrides.yaml").is_file()


def test_plan_predictions_are_current_and_say_the_runs_fit():
    proc = _run(str(HERE / "plan_predictions.py"), "--check", timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((HERE / "plan_predictions.json").read_text(encoding="utf-8"))
    assert sorted(data["specs"]) == [p.stem for p in SPECS]
    for name, pred in data["specs"].items():
        # no trainer OOM: the estimated training peak is within the GPU and no MEM rule fails, with the
        # trainer's state kept on the GPU beside the engine (offload would copy it both ways every step)
        assert pred["trainer_peak_gib"] < pred["gpu_total_gib"], name
        assert pred["verdicts_failing"] == [], name
        assert pred["trainer_offload"] == {"optimizer": False, "params": False}
        # every variant's engine holds a step's sequences at full length: no preemption
        assert not pred["preempts"], name
    # why the one-H200 set is 4B: the 8B shape's training peak on ONE H200 is past the GPU (MEM005)
    (rejected,) = data["rejected"].values()
    assert rejected["trainer_peak_gib"] > rejected["gpu_total_gib"] and "MEM005" in rejected["verdicts_failing"]
