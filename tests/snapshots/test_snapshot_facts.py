"""Known facts the committed snapshots must record (fast: reads backends/snapshots only, no network).

Each fact below was read by hand from the release's source; if an extractor regresses (or a snapshot is
regenerated from a different artifact) the corresponding assertion fails.
"""

from __future__ import annotations

import json

import pytest

from fp8spec.snapshots import Fact, Snapshot, check, committed_specs, dumps, list_snapshots, snapshot_path


def snap(spec: str) -> Snapshot:
    return Snapshot.load(spec)


# ----------------------------------------------------------------------------- all snapshots
def test_committed_specs_name_the_snapshot_files():
    assert {snapshot_path(s) for s in committed_specs()} == set(list_snapshots())


@pytest.mark.parametrize("path", list_snapshots(), ids=lambda p: p.name)
def test_snapshot_is_canonical_and_names_its_artifact(path):
    text = path.read_text(encoding="utf-8")
    raw = json.loads(text)
    assert dumps(raw) == text, "snapshot is not in canonical form (sorted keys, indent 1); regenerate it"
    assert path.name == f"{raw['package']}-{raw['version']}.json"
    art = raw["artifact"]
    assert len(art["sha256"]) == 64 and int(art["sha256"], 16) >= 0
    assert art["filename"].lower().startswith(raw["package"].replace("-", "_") + "-" + raw["version"] + "-")
    assert art["filename"].endswith(".whl")
    assert art["size"] > 0
    assert art["pip_download"].startswith("pip download --no-deps --only-binary=:all: ")
    from fp8spec.snapshots.core import package_info

    assert raw["extractor"]["module"] == package_info(raw["package"]).module  # the extractor that wrote it
    assert raw["data"], "empty data"


# ----------------------------------------------------------------------------- vLLM
def test_vllm_033_removed_calculate_kv_scales_and_has_online_block_fp8():
    s = snap("vllm==0.33.0")
    assert s.field("calculate_kv_scales") is None
    assert s.flag("--calculate-kv-scales") is None
    assert s.field("CacheConfig.calculate_kv_scales") is None
    assert s.flag("--quantization-config")["dest"] == "quantization_config"
    assert s.flag("-q")["dest"] == "quantization"
    assert "fp8_per_block" in s.choices("quantization")
    assert "fp8_per_block" in s.data["choices"]["quantization_online_shorthands"]
    assert {"fp8", "fp8_e4m3"} <= set(s.choices("kv_cache_dtype"))
    assert s.field("gpu_memory_utilization")["default_value"] == 0.92
    assert s.flag("--device-memory-utilization")["dest"] == "gpu_memory_utilization"
    assert s.flag("--no-enable-prefix-caching")["negated"] is True
    assert s.field("QuantizationConfigArgs.ignore") is not None
    assert s.env("VLLM_USE_DEEP_GEMM_E8M0")["default_value"] is True
    assert s.env("VLLM_USE_DEEP_GEMM_E8M0")["raw_default"] == "1"
    # 0.33.0 types kv_cache_dtype as CacheDType | str: argparse shows a metavar and accepts any string.
    assert s.flag("--kv-cache-dtype")["choices_enforced"] is False
    assert len(s.data["fields"]["EngineArgs"]) == 259


def test_vllm_024_still_has_calculate_kv_scales():
    s = snap("vllm==0.24.0")
    f = s.field("calculate_kv_scales")
    assert f is not None and f["default_value"] is False
    assert s.flag("--calculate-kv-scales")["kind"] == "boolean_optional"
    assert s.flag("--no-calculate-kv-scales")["negated"] is True
    # the online block shorthand already exists in 0.24.0
    assert "fp8_per_block" in s.choices("quantization")
    assert s.flag("--quantization-config") is not None
    assert s.flag("--kv-cache-dtype")["choices_enforced"] is True
    assert "nvfp4_ds_mla" not in s.choices("kv_cache_dtype")
    assert s.flag("--device-memory-utilization") is None


# ----------------------------------------------------------------------------- SGLang
@pytest.mark.parametrize("spec", ["sglang==0.5.12", "sglang==0.5.23"])
def test_sglang_kv_cache_dtype_has_no_plain_fp8(spec):
    s = snap(spec)
    kv = s.choices("kv_cache_dtype")
    assert "fp8" not in kv
    assert "fp8_e4m3" in kv
    assert "fp8" in s.choices("quantization")
    assert "w8a8_fp8" in s.choices("quantization")
    assert s.flag("--kv-cache-dtype")["choices_enforced"] is True
    assert s.flag("--tp-size")["field"] == "tp_size"
    assert s.flag("--tensor-parallel-size")["field"] == "tp_size"
    assert s.flag("--json-model-override-args") is not None
    assert s.env("SGLANG_FP8_IGNORED_LAYERS")["default_value"] == ""
    assert s.env("SGLANG_ENABLE_JIT_DEEPGEMM")["default_value"] is True


def test_sglang_0523_layout_and_deprecations():
    s = snap("sglang==0.5.23")
    assert s.data["layout"] == "arg_groups"
    assert s.field("kv_cache_dtype")["namespace"] == "model"
    assert s.field("disable_cuda_graph")["no_cli_reason"] == "no_cli=True"
    assert s.flag("--disable-cuda-graph")["deprecated"] is True
    assert s.flag("--ep")["field"] == "ep_size"
    assert "fp4_mx_block16" in s.choices("kv_cache_dtype")


def test_sglang_0512_layout_and_ignored_flags():
    s = snap("sglang==0.5.12")
    assert s.data["layout"] == "server_args"
    assert "fp4_e2m1" in s.choices("kv_cache_dtype")
    # DeprecatedAction only warns: the value never reaches ServerArgs
    assert s.flag("--hybrid-kvcache-ratio")["ignored"] is True
    ok, detail = s.confirm(Fact("flag", "--hybrid-kvcache-ratio"))
    assert not ok and "ignored" in detail


# ----------------------------------------------------------------------------- verl
def test_verl_tree_keys():
    s = snap("verl==0.9.1")
    assert s.confirm(Fact("key", "actor_rollout_ref.rollout.quantization"))[0]
    assert s.confirm(Fact("default", "actor_rollout_ref.rollout.quantization", None))[0]
    assert s.confirm(Fact("key", "actor_rollout_ref.actor.tis_imp_ratio_cap", present=False))[0]
    assert s.confirm(Fact("key", "algorithm.rollout_correction.rollout_is"))[0]
    assert s.confirm(Fact("key", "algorithm.rollout_correction.rollout_token_veto_threshold", present=False))[0]
    cfg = s.data["configs"]["ppo_trainer"]
    assert "actor_rollout_ref.rollout.engine_kwargs.vllm" in cfg["open_mappings"]
    assert cfg["keys"]["actor_rollout_ref.rollout.name"] == "???"
    # a new key under the open engine_kwargs mapping needs '+', and composes
    assert s.confirm(Fact("new_key", "actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype"))[0]
    # no key can be added under a leaf
    assert not s.confirm(Fact("new_key", "actor_rollout_ref.rollout.quantization.x"))[0]


def test_verl_megatron_tree():
    s = snap("verl==0.9.1")
    m = "ppo_trainer+model_engine=megatron:"
    assert s.confirm(Fact("key", m + "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"))[0]
    assert s.confirm(Fact("key", m + "actor_rollout_ref.actor.megatron.override_transformer_config.fp8", present=False))[0]
    assert s.confirm(Fact("new_key", m + "actor_rollout_ref.actor.megatron.override_transformer_config.fp8"))[0]
    assert s.confirm(Fact("new_key", m + "actor_rollout_ref.actor.optim.override_optimizer_config.fp8_recipe"))[0]
    assert not s.confirm(Fact("key", "actor_rollout_ref.actor.megatron.override_transformer_config"))[0]
    assert "megatron" in s.data["config_groups"]["model_engine"]


# ----------------------------------------------------------------------------- megatron-core / TE
@pytest.mark.parametrize("spec", ["megatron-core==0.16.1", "megatron-core==0.18.2", "megatron-core==0.19.2"])
def test_megatron_fp8_fields(spec):
    s = snap(spec)
    assert s.choices("TransformerConfig.fp8") == ["e4m3", "hybrid"]
    assert "blockwise" in s.choices("TransformerConfig.fp8_recipe")
    assert s.field("fp8_recipe")["default_value"] == "delayed"
    assert s.field("first_last_layers_bf16")["default_value"] is False
    assert s.field("OptimizerConfig.fp8_recipe") is not None
    assert s.field("tensor_model_parallel_size")["declared_in"] == "ModelParallelConfig"
    assert s.data["enums"]["Fp8Recipe"]["blockwise"] == "blockwise"


def test_megatron_cli_flags_only_where_training_ships():
    assert snap("megatron-core==0.16.1").data["flags"] == {}
    s = snap("megatron-core==0.18.2")
    assert s.flag("--fp8-format")["dest"] == "fp8"
    assert s.flag("--fp8-param-gather") is not None
    assert s.flag("--fp8-param") is None  # fp8_param is excluded from the generated flags
    assert s.flag("--disable-fp8-wgrad")["action"] == "store_false"
    assert s.flag("--first-last-layers-bf16")["action"] == "store_true"


def test_transformer_engine_recipes():
    s = snap("transformer-engine==2.20.2")
    assert s.has_class("Float8BlockScaling")
    rec = s.data["recipes"]["Float8BlockScaling"]
    assert rec["fields"]["use_f32_scales"]["env"] == ["NVTE_FP8_BLOCK_SCALING_FP32_SCALES"]
    assert "fp8_quant_fwd_inp" in rec["class_attributes"]
    assert "fp8_quant_fwd_inp" not in rec["fields"]
    assert rec["fields"]["w_block_scaling_dim"]["default_value"] == 2
    assert s.env("NVTE_FP8_BLOCK_SCALING_FP32_SCALES")["defaults"] == ["0"]
    assert "Float8BlockScaling.use_f32_scales" in s.env("NVTE_FP8_BLOCK_SCALING_FP32_SCALES")["feeds"]
    assert "12.9" in s.data["hardware_support_checks"]["_compute_fp8_block_scaling_support"]


# ----------------------------------------------------------------------------- check API
def test_check_reports_each_fact():
    results = check(
        {
            "vllm==0.33.0": [
                Fact("field", "calculate_kv_scales", present=False),
                {"kind": "flag", "subject": "--calculate-kv-scales"},
                Fact("choice", "quantization", "fp8_per_block"),
                Fact("flag", "--kv_cache_dtype"),  # FlexibleArgumentParser accepts underscores
            ],
            "sglang==0.5.23": [Fact("choice", "kv_cache_dtype", "fp8")],
            "vllm==0.0.1": [Fact("flag", "--model")],
        }
    )
    assert [r.confirmed for r in results] == [True, False, True, True, False, False]
    assert "no snapshot" in results[-1].detail


def test_fact_kind_is_validated():
    with pytest.raises(ValueError):
        Fact("flags", "--x")
