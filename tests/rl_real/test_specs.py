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


DENSE_SETS = ("4b-h200", "4b-h200-long", "8b-h200x2")
LONG_PREEMPTING = ("real-4b-h200-long-bf16", "real-4b-h200-long-fp8")
MOE_VARIANTS = ("bf16", "fp8-rollout", "fp8-e2e", "fp8-experts-bf16")
MOE_SETS = ("moe9l-h200", "moe9l-h200-packed")


def _differ(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


NAME_ONLY = ["name", "trainer.checkpoint_dir"]


def test_specs_are_base_plus_their_fields_and_nothing_else():
    assert [p.name for p in SPECS] == sorted(
        [f"real-{s}-{v}.yaml" for s in DENSE_SETS for v in ("bf16", "fp8", "fp8kv")]
        + [f"real-{s}-{v}.yaml" for s in MOE_SETS for v in MOE_VARIANTS]
        + [f"real-4b-h200-flex-{v}.yaml" for v in ("bf16", "fp8kv")]
    )
    assert _run(str(HERE / "make_specs.py"), "--check").returncode == 0
    specs = {p.stem: _flat(YAML(typ="safe").load(p.read_text(encoding="utf-8"))) for p in SPECS}
    for set_name in DENSE_SETS:
        bf16, fp8, fp8kv = (specs[f"real-{set_name}-{v}"] for v in ("bf16", "fp8", "fp8kv"))
        assert _differ(bf16, fp8) == sorted([*NAME_ONLY, "linear.quantize", "linear.deep_gemm",
                                             *[k for k in bf16 if k.startswith("acknowledge.")]])
        assert _differ(fp8, fp8kv) == sorted([*NAME_ONLY, "kv_cache.dtype", "kv_cache.recalibrate"])
        assert fp8kv["correction.method"] == fp8["correction.method"] == "tis" and fp8kv["correction.clip"] == 2.0
        # a real rollout workload: >= 128 sequences per step, responses of at least 2K tokens
        assert bf16["algorithm.train_batch_size"] * bf16["rollout.n"] >= 128
        assert bf16["rollout.max_response_length"] >= 2048


def test_the_long_set_is_the_4b_set_with_longer_responses_and_the_fused_log_prob_path():
    short, long = (
        _flat(YAML(typ="safe").load((HERE / "specs" / f"real-{s}-fp8kv.yaml").read_text(encoding="utf-8")))
        for s in ("4b-h200", "4b-h200-long")
    )
    assert _differ(short, long) == sorted([*NAME_ONLY, "rollout.max_response_length", "training.fused_logprob"])
    assert long["training.fused_logprob"] is True and "training.fused_logprob" not in short
    assert long["rollout.max_response_length"] == 2 * short["rollout.max_response_length"] == 4096


@pytest.mark.parametrize("variant", ["bf16", "fp8kv"])
def test_the_flex_set_is_the_4b_set_with_the_trainers_three_levers(variant):
    """flex_attention, the fused log-prob path and 12,288-token packed micro-batches; the plan's packing line fits
    that budget, and the engine, the workload and the precision fields are the 4B set's."""
    base, flex = _spec(f"real-4b-h200-{variant}"), _spec(f"real-4b-h200-flex-{variant}")
    assert _differ(base, flex) == sorted([*NAME_ONLY, "training.attention", "training.fused_logprob",
                                          "algorithm.ppo_max_token_len_per_gpu"])
    assert flex["training.attention"] == "flex_attention" and flex["training.fused_logprob"] is True
    proc = run_cli_here("plan", str(HERE / "specs" / f"real-4b-h200-flex-{variant}.yaml"), "-f", "json")
    room = json.loads(proc.stdout)["trainer"]["packing_room"]["update_budget"]["value"]
    assert flex["algorithm.ppo_max_token_len_per_gpu"] == 12288 <= room


def test_moe_variants_differ_only_in_their_precision_fields():
    """The MoE set (Megatron): all BF16 / BF16 training + FP8 rollout / end-to-end FP8 / FP8 with BF16 experts,
    each step one decision away from the one before; the same workload as the dense sets."""
    specs = {v: _flat(YAML(typ="safe").load((HERE / "specs" / f"real-moe9l-h200-{v}.yaml").read_text(
        encoding="utf-8"))) for v in MOE_VARIANTS}
    bf16, rollout, e2e, experts = (specs[v] for v in MOE_VARIANTS)
    assert _differ(bf16, rollout) == sorted([*NAME_ONLY, "linear.quantize", "linear.deep_gemm", "kv_cache.dtype",
                                             "kv_cache.recalibrate"])
    # end-to-end FP8 also gives the engine a smaller share: TE's FP8 weight copies stay beside it (the plan)
    assert _differ(rollout, e2e) == sorted([*NAME_ONLY, "acknowledge.TRN007", "training.precision",
                                            "training.fp8_recipe", "training.fp8_scaling", "training.expert_gemm",
                                            "rollout.gpu_memory_utilization"])
    assert _differ(e2e, experts) == sorted([*NAME_ONLY, "acknowledge.TRN007", "training.bf16_modules",
                                            "training.expert_gemm", "rollout.gpu_memory_utilization"])
    assert [specs[v]["rollout.gpu_memory_utilization"] for v in MOE_VARIANTS] == [0.15, 0.15, 0.10, 0.15]
    # BF16 experts (all but end-to-end FP8) run TE's CUTLASS grouped GEMM; FP8 experts cannot (TRN013)
    assert [specs[v]["training.expert_gemm"] for v in MOE_VARIANTS] == ["cutlass", "cutlass", "cublas", "cutlass"]
    assert all(s["training.backend"] == "megatron" and "training.gradient_checkpointing" not in s
               for s in specs.values())
    assert bf16["algorithm.train_batch_size"] * bf16["rollout.n"] >= 128 and bf16["rollout.max_response_length"] >= 2048


def _spec(name: str) -> dict:
    return _flat(YAML(typ="safe").load((HERE / "specs" / f"{name}.yaml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("variant", MOE_VARIANTS)
def test_the_packed_moe_set_differs_only_in_the_update_budget(variant):
    """Each packed variant is its one-sequence twin with a 6,144-token update budget; the log-prob passes follow
    it (the compiled overrides), and the plan still fits every variant with the engine's share unchanged."""
    one, packed = _spec(f"real-moe9l-h200-{variant}"), _spec(f"real-moe9l-h200-packed-{variant}")
    assert _differ(one, packed) == sorted([*NAME_ONLY, "algorithm.ppo_max_token_len_per_gpu"])
    assert packed["algorithm.ppo_max_token_len_per_gpu"] == 6144 == 2 * (
        one["rollout.max_prompt_length"] + one["rollout.max_response_length"])
    preds = json.loads((HERE / "plan_predictions.json").read_text(encoding="utf-8"))["specs"]
    p_one, p_packed = preds[f"real-moe9l-h200-{variant}"], preds[f"real-moe9l-h200-packed-{variant}"]
    # packing raises the training peak, not what stays beside the engine, so the engine's share still fits
    assert p_packed["trainer_peak_gib"] > p_one["trainer_peak_gib"]
    assert p_packed["trainer_resident_during_rollout_gib"] == p_one["trainer_resident_during_rollout_gib"]
    assert p_packed["kv_cache_tokens"] == p_one["kv_cache_tokens"]


def test_the_packed_bundles_compile_the_budget_into_every_pass(bundles):
    for variant in MOE_VARIANTS:
        text = (bundles / f"real-moe9l-h200-packed-{variant}" / "overrides.yaml").read_text(encoding="utf-8")
        for key in ("actor.ppo_max_token_len_per_gpu", "rollout.log_prob_max_token_len_per_gpu",
                    "ref.log_prob_max_token_len_per_gpu"):
            assert f'"actor_rollout_ref.{key}=6144"' in text, (variant, key)
        assert '"actor_rollout_ref.actor.use_dynamic_bsz=true"' in text


def test_a_set_extends_another_by_its_differing_fields_only():
    from benchmarks.rl_real.make_specs import _sets

    table = {"sets": {
        "a": {"model": {"name": "m", "path": "/p"}, "training": {"gradient_checkpointing": None},
              "variants": {"x": {"linear": {"quantize": False}}}},
        "b": {"extends": "a", "model": {"path": "/q"}, "rollout": {"n": 4}},
        "c": {"extends": "b", "variants": {"y": {"linear": {"quantize": True}}}},
    }}
    sets = _sets(table)
    assert sets["b"]["model"] == {"name": "m", "path": "/q"} and sets["b"]["rollout"] == {"n": 4}
    # a parent's null still removes the field from base.yaml in the child's specs
    assert sets["b"]["training"] == {"gradient_checkpointing": None}
    assert sorted(sets["c"]["variants"]) == ["x", "y"] and "extends" not in sets["c"]
    assert table["sets"]["a"]["model"]["path"] == "/p"  # the parent's table is left as it was
    with pytest.raises(SystemExit, match="loop: a -> b -> a"):
        _sets({"sets": {"a": {"extends": "b"}, "b": {"extends": "a"}}})
    with pytest.raises(SystemExit, match="extends nope, which variants.yaml does not define"):
        _sets({"sets": {"a": {"extends": "nope"}}})


def test_model_configs_are_the_catalogs_shapes():
    from benchmarks.common.models import catalog_config

    for folder, model_id in (("qwen3-4b", "Qwen/Qwen3-4B"), ("qwen3-8b", "Qwen/Qwen3-8B-Base")):
        config = json.loads((HERE / "models" / folder / "config.json").read_text(encoding="utf-8"))
        assert config == catalog_config(model_id)
        assert config["vocab_size"] == 151936
    # the MoE set: Qwen3-30B-A3B's every field but the layer count
    moe = json.loads((HERE / "models/qwen3-30b-a3b-9l/config.json").read_text(encoding="utf-8"))
    assert moe == {**catalog_config("Qwen/Qwen3-30B-A3B"), "num_hidden_layers": 9, "max_window_layers": 9}


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
        # every variant's engine holds a step's sequences at full length, except the long set's BF16 and W8A8
        # engines: that set exists to run BF16 where it preempts (its FP8 KV engine holds all 128)
        assert pred["preempts"] == (name in LONG_PREEMPTING), name
    # why the one-H200 set is 4B: the 8B shape's training peak on ONE H200 is past the GPU (MEM005)
    rejected = data["rejected"]["real-8b-h200-fp8kv (8B shape on ONE H200)"]
    assert rejected["trainer_peak_gib"] > rejected["gpu_total_gib"] and "MEM005" in rejected["verdicts_failing"]
    # why the MoE set has 9 layers: with a tenth, the trainer's state leaves the engine too little room (MEM003)
    tenth = data["rejected"]["real-moe10l-h200-fp8-e2e (a tenth MoE layer)"]
    assert "MEM003" in tenth["verdicts_failing"]
    assert tenth["trainer_resident_during_rollout_gib"] > data["specs"]["real-moe9l-h200-fp8-e2e"][
        "trainer_resident_during_rollout_gib"]


def test_a_set_names_the_shared_variants_it_runs():
    from benchmarks.rl_real.make_specs import _variants

    table = {"variants": {"bf16": {"a": 1}, "fp8": {"a": 2}, "fp8kv": {"a": 3}}}
    assert list(_variants(table, {"variants": ["bf16", "fp8kv"]})) == ["bf16", "fp8kv"]
    assert list(_variants(table, {})) == ["bf16", "fp8", "fp8kv"]
    assert _variants(table, {"variants": {"own": {"b": 1}}}) == {"own": {"b": 1}}
    with pytest.raises(SystemExit, match="no shared variant fp16"):
        _variants(table, {"variants": ["bf16", "fp16"]})
