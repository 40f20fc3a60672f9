"""The shipped profiles: every file loads, every fact has real evidence, and the facts the compiler
relies on are present in every version of each backend."""

from __future__ import annotations

import re

import pytest

from fp8spec.profiles import KINDS, available_versions, backends_root, load_profile, parse_profile_file

ALL = [(kind, version) for kind in KINDS for version in available_versions(kind)]

# Facts the compiler and the checks read. Every version of a backend must record them (null/false
# where the release lacks the feature) so that code never has to guess between "absent" and "forgotten".
REQUIRED = {
    "verl": [
        "supports.vllm", "supports.sglang", "supports.torch", "supports.megatron_bridge",
        "stack.megatron_core", "stack.transformer_engine", "entrypoint", "config.name", "config.dir",
        "key.rollout_name", "values.rollout_name", "key.rollout_quantization",
        "values.rollout_quantization", "key.calculate_log_probs", "key.rollout_tp",
        "key.rollout_gpu_memory_utilization", "key.rollout_n", "key.rollout_engine_kwargs",
        "key.rollout_load_format", "key.rollout_max_model_len", "key.rollout_ep", "key.rollout_pp",
        "key.rollout_is", "values.rollout_is", "key.rollout_is_threshold", "key.rollout_rs",
        "values.rollout_rs", "key.rollout_rs_threshold", "key.rollout_is_batch_normalize",
        "key.bypass_mode", "metrics.rollout_corr", "key.model_path", "key.model_engine",
        "values.model_engine", "key.megatron_transformer_override", "key.megatron_optimizer_override",
        "declared.megatron_transformer_override_keys", "key.megatron_tp", "key.megatron_pp",
        "key.megatron_ep", "key.megatron_cp", "key.megatron_etp", "key.trainer_nnodes",
        "key.trainer_n_gpus_per_node", "key.trainer_project_name", "key.trainer_experiment_name",
        "key.trainer_logger", "key.data_train_files", "key.data_val_files", "key.data_max_prompt_length",
        "key.data_max_response_length", "key.data_train_batch_size", "key.ppo_mini_batch_size",
        "key.ppo_micro_batch_size_per_gpu", "key.actor_lr", "key.adv_estimator", "values.adv_estimator",
        "key.external_lib", "key.ray_runtime_env_env_vars", "hydra.plus_required_under", "removed_keys",
        "capability.kv_scale_recalibration", "capability.fsdp_fp8_training",
        "capability.vllm_router_auto_ignored", "capability.vllm_fp8_weight_block_size",
        "capability.sglang_fp8_ignored_layers_env", "capability.sglang_min_version", "batch.divisibility",
        "values.trainer_logger", "key.trainer_default_local_dir", "key.trainer_save_freq",
        "key.trainer_max_actor_ckpt_to_keep", "key.trainer_resume_mode", "values.trainer_resume_mode",
        "key.trainer_resume_from_path", "key.trainer_test_freq", "key.trainer_val_before_train",
        "key.trainer_total_training_steps", "key.reward_manager_name", "values.reward_manager",
        "key.custom_reward_function_path", "key.custom_reward_function_name", "key.dapo_overlong_enable",
        "key.dapo_overlong_len", "key.dapo_overlong_penalty_factor", "key.dapo_overlong_log", "key.dapo_max_resp_len",
        "key.ppo_max_token_len_per_gpu", "key.rollout_log_prob_max_token_len_per_gpu",
        "key.ref_log_prob_max_token_len_per_gpu", "key.megatron_router_replay_mode", "values.router_replay",
        "key.rollout_routing_replay", "key.rollout_engine_kwargs_vllm", "key.rollout_engine_kwargs_sglang",
        "env.external_modules", "package.distributions",
    ],
    "vllm": [
        "cli.serve", "flag.model", "flag.quantization", "values.quantization", "block_fp8.mode",
        "block_fp8.quantization", "flag.quantization_config", "quantization_config.ignore_key",
        "ignore.match", "flag.hf_overrides", "flag.kv_cache_dtype", "values.kv_cache_dtype",
        "flag.calculate_kv_scales", "flag.tensor_parallel_size", "flag.gpu_memory_utilization",
        "flag.max_model_len", "flag.enable_expert_parallel", "flag.worker_extension_cls",
        "flag.load_format", "flag.attention_backend", "env.use_deep_gemm", "env.deep_gemm_e8m0",
        "attention.flash_attn_kv_dtypes", "attention.hopper_default", "capability.online_block_fp8",
        "capability.calculate_kv_scales", "capability.pads_block_shards",
        "capability.router_is_linear_layer", "capability.kv_scales_loadable",
        "plugin.general_entry_point_group", "block.tp_divisibility", "capability.return_routed_experts",
        "engine_arg.kv_cache_dtype", "engine_arg.hf_overrides", "engine_arg.calculate_kv_scales",
        "hf_config.quantization_config", "quantization_config.fp8_ignored_layers_key",
        "quantization_config.fp8_block_size_key", "quantization_config.linear_key", "quantization_config.moe_key",
        "package.distributions", "verified.fast_block_quant_in_engine", "verified.fast_block_quant_in_loop",
        "verified.direct_sync_in_engine", "verified.direct_sync_in_loop",
    ],
    "sglang": [
        "cli.serve", "flag.model_path", "flag.quantization", "values.quantization",
        "flag.json_model_override_args", "flag.kv_cache_dtype", "values.kv_cache_dtype", "flag.tp_size",
        "flag.mem_fraction_static", "flag.context_length", "flag.load_format",
        "flag.quantization_param_path", "env.fp8_ignored_layers", "capability.online_block_fp8",
        "capability.kv_q_scale", "capability.deepgemm_ue8m0_hopper", "capability.kv_scales_loadable",
        "block.tp_divisibility", "capability.return_routed_experts", "engine_arg.kv_cache_dtype",
        "engine_arg.custom_weight_loader", "package.distributions", "verified.fast_block_quant_in_engine",
        "verified.fast_block_quant_in_loop",
    ],
    "megatron-core": [
        "field.fp8", "field.fp8_recipe", "field.fp8_param", "field.first_last_layers_bf16",
        "field.num_layers_at_start_in_bf16", "field.num_layers_at_end_in_bf16", "field.moe_router_dtype",
        "optimizer.fp8_recipe", "rule.first_last_bf16_not_delayed",
        "field.num_layers_in_first_pipeline_stage", "field.num_layers_in_last_pipeline_stage",
        "field.expert_tensor_parallel_size", "rule.layout_world_divisible", "rule.layout_heads_vs_tp",
        "rule.layout_ep_needs_experts", "rule.layout_experts_vs_ep", "rule.layout_layers_vs_pp",
        "package.distributions",
    ],
    "transformer-engine": [
        "env.block_scaling_fp32_scales", "recipe.classes", "requirement.blockwise", "requirement.mxfp8",
        "requirement.blackwell_blockwise_pow2", "format.values", "package.distributions",
    ],
}

# Evidence must point somewhere checkable: a file:line inside the release, an upstream URL, or a
# statement of what was verified and how.
_FILE_LINE = re.compile(r"[\w./{},-]+\.(py|yaml|txt|md|json)(:\d+)?|METADATA:\d+|RECORD")
_URL = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(pull|issues|releases)/")


def test_there_are_profiles_for_every_kind():
    for kind in KINDS:
        assert available_versions(kind), f"no profile for {kind}"


def test_every_yaml_file_is_a_loadable_profile():
    root = backends_root()
    for kind in KINDS:
        files = sorted((root / kind).glob("*.yaml"))
        assert [f.stem for f in files] == available_versions(kind), f"{kind}: file names are not all versions"
        for f in files:
            parse_profile_file(f)  # raises ProfileError with the problems


@pytest.mark.parametrize("kind, version", ALL)
def test_profile_loads_and_names_its_source(kind, version):
    p = load_profile(kind, version)
    assert p.source.package == f"{kind}=={version}"
    assert version in p.source.artifact
    assert p.source.artifact.endswith((".whl", ".tar.gz"))


@pytest.mark.parametrize("kind, version", ALL)
def test_every_fact_has_checkable_evidence(kind, version):
    p = load_profile(kind, version)
    for fid, fact in p.facts.items():
        assert fact.evidence.strip(), fid
        assert _FILE_LINE.search(fact.evidence) or _URL.search(fact.evidence) or "erified" in fact.evidence, (
            f"{kind} {version} {fid}: evidence names no file:line, URL or verification: {fact.evidence!r}"
        )


@pytest.mark.parametrize("kind, version", ALL)
def test_required_facts_present(kind, version):
    p = load_profile(kind, version)
    missing = [fid for fid in REQUIRED[kind] if not p.has(fid)]
    assert not missing, f"{kind} {version} lacks {missing}"


def test_verls_pins_are_profiled():
    """What the newest verl pins or pairs with has a profile (the default stack itself: tests/quality)."""
    verl = load_profile("verl", available_versions("verl")[-1])
    assert verl.value("supports.vllm") in available_versions("vllm")
    assert verl.value("supports.sglang") in available_versions("sglang")
    assert verl.value("stack.megatron_core") in available_versions("megatron-core")
    assert verl.value("stack.transformer_engine") in available_versions("transformer-engine")


def test_vllm_versions_really_differ():
    old, new = load_profile("vllm", "0.24.0"), load_profile("vllm", "0.33.0")
    assert old.value("flag.calculate_kv_scales") == "--calculate-kv-scales"
    assert new.value("flag.calculate_kv_scales") is None
    assert "fnmatch" not in old.value("ignore.match") and "fnmatch" in new.value("ignore.match")
    assert old.value("capability.pads_block_shards")["moe"] is False
    assert new.value("capability.pads_block_shards")["moe"] is True


def test_sglang_rejects_plain_fp8_kv_dtype():
    for version in available_versions("sglang"):
        p = load_profile("sglang", version)
        assert "fp8" not in p.value("values.kv_cache_dtype")
        assert "fp8_e4m3" in p.value("values.kv_cache_dtype")


def test_flags_look_like_flags():
    for kind in ("vllm", "sglang"):
        for version in available_versions(kind):
            p = load_profile(kind, version)
            for fid in p.ids("flag."):
                v = p.value(fid)
                if isinstance(v, str):
                    assert re.fullmatch(r"--[a-z0-9][a-z0-9-]*", v), (kind, version, fid, v)
