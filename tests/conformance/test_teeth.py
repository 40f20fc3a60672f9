"""The conformance checks have teeth: hand-made bad bundles (a removed Megatron key, a vLLM 0.24 flag
emitted for 0.33, a misplaced '+', a value outside the choices, an env var nobody reads, a wrong ignore
pattern) are each caught, with a message that names the culprit."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest

from fp8spec.quoting import yaml_string_list, yaml_string_map
from tests.conformance import checks
from tests.conformance.checks import (
    check_argv,
    check_env,
    check_hydra,
    check_megatron,
    check_quantization_config,
    compile_variant,
)
from tests.conftest import SPECS, require, skip_missing_extra

require("hydra")
if importlib.util.find_spec("verl") is None:
    skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)

TC = checks.TRANSFORMER_OVERRIDE
EK = checks.ENGINE_KWARGS


def with_overrides(c, add=(), drop=()):
    """The bundle with overrides added/removed; runtime_env.yaml follows the Ray env-var overrides."""
    overrides = [o for o in c.overrides if not any(o.lstrip("+").startswith(d) for d in drop)] + list(add)
    prefix = checks.ENV_VARS + "."
    env = {o.key_or_group[len(prefix):]: str(o.value()) for o in checks.parse_overrides(overrides)
           if o.key_or_group.startswith(prefix)}
    files = dict(c.files)
    files["overrides.yaml"] = yaml_string_list(overrides)
    files["runtime_env.yaml"] = "env_vars:\n" + yaml_string_map(env, indent=2)
    return dataclasses.replace(c, files=files)


def with_env(c, **env):
    if c.trainer:
        return with_overrides(c, add=[f"+{checks.ENV_VARS}.{k}='{v}'" for k, v in env.items()])
    doc = json.loads(c.files["engine_args.json"])
    doc["env"].update(env)
    return dataclasses.replace(c, files={**c.files, "engine_args.json": json.dumps(doc)})


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("teeth")
    once = {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "once"}}
    v024, v033 = {**once, "stack": {"vllm": "0.24.0"}}, {**once, "stack": {"vllm": "0.33.0"}}
    return {
        "megatron": compile_variant(SPECS / "qwen3-30b.yaml", "megatron+vllm", {}, tmp, "megatron"),
        "fsdp024": compile_variant(SPECS / "qwen3-8b.yaml", "fsdp+vllm", v024, tmp, "fsdp024"),
        "fsdp033": compile_variant(SPECS / "qwen3-8b.yaml", "fsdp+vllm", v033, tmp, "fsdp033"),
        "serve024": compile_variant(SPECS / "qwen3-8b.yaml", "vllm", {"stack": {"vllm": "0.24.0"}}, tmp,
                                    "s024"),
        "sglang": compile_variant(SPECS / "qwen3-8b-sglang.yaml", "fsdp+sglang", {}, tmp, "sglang"),
        "sglang_serve": compile_variant(SPECS / "qwen3-8b-sglang.yaml", "sglang", {}, tmp, "sglang_serve"),
    }


def test_the_unmodified_bundles_pass(bundles):
    for c in bundles.values():
        assert checks.check_bundle(c) == [], c.label


# ----------------------------------------------------------------------------- Megatron
def test_megatron_key_removed_upstream_is_caught(bundles):
    """moe_use_legacy_grouped_gemm exists in megatron-core 0.16.1 but was removed before 0.18.2 (the stack's
    version): the installed 0.16.1 still accepts it, the 0.18.2 snapshot does not."""
    bad = with_overrides(bundles["megatron"], add=[f"+{TC}.moe_use_legacy_grouped_gemm=true"])
    problems = check_hydra(bad)
    assert any("megatron-core 0.18.2 TransformerConfig has no field 'moe_use_legacy_grouped_gemm'" in p
               for p in problems), problems


def test_megatron_unknown_field_and_bad_literal_fail_the_real_transformer_config(bundles):
    bad = with_overrides(bundles["megatron"], add=[f"+{TC}.fp8_recipie='blockwise'", f"+{TC}.fp8='e5m2'"],
                         drop=[f"{TC}.fp8="])
    problems = check_megatron(bad)
    assert any("unknown field 'fp8_recipie'" in p for p in problems), problems
    assert any("fp8='e5m2' is not one of" in p for p in problems), problems
    assert any("not one of megatron-core 0.18.2 TransformerConfig.fp8 choices" in p for p in check_hydra(bad))


def test_megatron_rejects_bf16_ends_with_delayed_scaling(bundles):
    """Megatron's own __post_init__ runs: first/last layers in BF16 are refused with the delayed recipe."""
    bad = with_overrides(bundles["megatron"], drop=[f"{TC}.fp8_recipe="],
                         add=[f"+{TC}.fp8_recipe='delayed'", f"+{TC}.first_last_layers_bf16=true"])
    problems = check_megatron(bad)
    assert any("Delayed scaling does not support first / last layer in BF16" in p for p in problems), problems


def test_fp8_param_without_fp8_is_rejected(bundles):
    bad = with_overrides(bundles["megatron"], drop=[f"{TC}.fp8="], add=[f"+{TC}.fp8_param=true"])
    assert any("fp8_param must be used together with fp8 mode" in p for p in check_megatron(bad))


# ----------------------------------------------------------------------------- engine versions
def test_vllm_024_flag_emitted_for_033_is_caught(bundles):
    argv = bundles["serve024"].argv
    assert "--calculate-kv-scales" in argv
    assert check_argv(argv, "vllm", "0.24.0") == []
    problems = check_argv(argv, "vllm", "0.33.0")
    assert any(p.startswith("--calculate-kv-scales: not accepted by vllm 0.33.0") for p in problems), problems


def test_vllm_024_engine_kwarg_emitted_for_033_is_caught(bundles):
    # calculate_kv_scales is an engine argument of 0.24.0 only (no bundle emits it any more: it calibrates on
    # vLLM's profiling dummy run); planted into a 0.33.0 bundle it must be caught
    new = bundles["fsdp033"]
    key = f"{EK}.vllm.calculate_kv_scales"
    assert not any(key in o for o in new.overrides)
    bad = with_overrides(new, add=[f"+{key}=true"])
    problems = check_hydra(bad)
    assert any("vllm 0.33.0 has no engine argument 'calculate_kv_scales'" in p for p in problems), problems
    assert check_hydra(with_overrides(new, add=[f"+{EK}.vllm.max_num_seqs=64"])) == []


def test_kv_calibration_must_be_realised(bundles):
    c = bundles["fsdp033"]
    assert checks.check_kv_calibration(c) == []
    bad = with_overrides(c, drop=[f"{checks.ENV_VARS}.FP8SPEC_RUNTIME_PATCHES"])
    assert any("scales stay 1.0" in p for p in checks.check_kv_calibration(bad))


# ----------------------------------------------------------------------------- Hydra '+' rules
@pytest.mark.parametrize("override,message", [
    ("+actor_rollout_ref.rollout.n=4", "is declared in verl 0.9.1's tree and must not carry '+'"),
    (f"{EK}.vllm.max_num_seqs=64", "without '+' Hydra rejects it"),
    ("actor_rollout_ref.actor.tis_imp_ratio_cap=2.0", "not in verl 0.9.1's composed tree"),
    ("+actor_rollout_ref.rollout.fp8_magic=1", "not under a mapping verl passes through"),
    ("+actor_rollout_ref.rollout.quantization.method=1",
     "cannot add under actor_rollout_ref.rollout.quantization"),
    (f"+{EK}.sglang.kv_cache_dtype='fp8_e4m3'", "but the rollout engine is vllm"),
    (f"+{EK}.vllm.kv_cache_dtype_typo='fp8'", "vllm 0.24.0 has no engine argument 'kv_cache_dtype_typo'"),
])
def test_hydra_key_rules(bundles, override, message):
    bad = with_overrides(bundles["fsdp024"], add=[override])
    problems = check_hydra(bad)
    assert any(message in p for p in problems), problems


# ----------------------------------------------------------------------------- choices
def test_sglang_plain_fp8_kv_dtype_is_caught(bundles):
    bad = with_overrides(bundles["sglang"], add=[f"+{EK}.sglang.kv_cache_dtype='fp8'"])
    assert any("not one of sglang 0.5.12's kv_cache_dtype choices" in p for p in check_hydra(bad))
    argv = bundles["sglang_serve"].argv + ["--kv-cache-dtype", "fp8"]
    assert any(p.startswith("--kv-cache-dtype fp8: not one of") for p in check_argv(argv, "sglang", "0.5.23"))


def test_unknown_quantization_method_is_caught(bundles):
    argv = [a if a != "fp8_per_block" else "fp8_per_blocks" for a in bundles["serve024"].argv]
    assert any("fp8_per_blocks: not one of" in p for p in check_argv(argv, "vllm", "0.24.0"))
    bad = with_overrides(bundles["fsdp024"], drop=["actor_rollout_ref.rollout.quantization="],
                         add=["actor_rollout_ref.rollout.quantization='fp8_per_block'"])
    assert any("verl 0.9.1 does not support 'fp8_per_block' for vllm" in p for p in check_hydra(bad))


# ----------------------------------------------------------------------------- env vars
@pytest.mark.parametrize("bundle,name,value,message", [
    ("fsdp024", "VLLM_USE_DEEP_GEMM_E8MO", "0", "not read by vllm 0.24.0"),
    ("fsdp024", "VLLM_USE_DEEP_GEMM_E8M0", "false", "parses it as 0/1"),
    ("fsdp024", "SGLANG_FP8_IGNORED_LAYERS", "x", "a sglang variable in a vllm bundle"),
    ("fsdp024", "NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "1", "TransformerEngine is not used"),
    ("megatron", "NVTE_FP8_BLOCK_SCALING_FP32_SCALE", "1", "not read by transformer-engine 2.20.2"),
    ("fsdp024", "FP8SPEC_RUNTIME_PATCH", "kv_scales", "not read by fp8spec.runtime"),
    ("fsdp024", "FP8SPEC_RUNTIME_PATCHES", "kv_scale", "unknown patches ['kv_scale']"),
    ("fsdp024", "VERL_USE_EXTERNAL_MODULE", "fp8spec.runtime", "not read by verl 0.9.1"),
    ("fsdp024", "VERL_USE_EXTERNAL_MODULES", "fp8spec.runtim", "module 'fp8spec.runtim' does not exist"),
    ("serve024", "VERL_USE_EXTERNAL_MODULES", "fp8spec.runtime", "a verl variable in a standalone"),
    ("fsdp024", "CUDA_LAUNCH_BLOCKING", "1", "no known reader"),
])
def test_env_var_checks(bundles, bundle, name, value, message):
    problems = check_env(with_env(bundles[bundle], **{name: value}))
    assert any(message in p for p in problems), problems


def test_env_readers_are_found():
    assert "VERL_USE_EXTERNAL_MODULES" in checks.verl_env("0.9.1")
    assert {"FP8SPEC_RUNTIME_PATCHES", "FP8SPEC_KV_SCALE_DIVISORS"} <= checks.fp8spec_runtime_env()


# ----------------------------------------------------------------------------- ignore patterns
def test_fnmatch_pattern_for_vllm_024_and_a_pattern_that_misses_are_caught(bundles):
    c = bundles["serve024"]
    config = {"linear": "fp8_per_block", "ignore": ["model.layers.*.mlp.gate"]}
    problems = check_quantization_config(config, "vllm", "0.24.0", ["fp8_per_block"])
    assert any("fnmatch-style; vllm 0.24.0 matches only" in p for p in problems), problems
    assert check_quantization_config(config, "vllm", "0.33.0", ["fp8_per_block"]) == []
    # qwen3-8b (dense) keeps no linear in BF16: an ignore pattern that matches one is wrong
    wrong = {"linear": "fp8_per_block", "ignore": ["re:model\\.layers\\.\\d+\\.self_attn\\.o_proj$"]}
    problems = check_quantization_config(wrong, "vllm", "0.24.0", ["fp8_per_block"], c.ctx)
    assert any("keep ['model.layers.0.self_attn.o_proj'" in p for p in problems), problems
    assert any("not a QuantizationConfigArgs field" in p
               for p in check_quantization_config({"targets": {}}, "vllm", "0.24.0", ["fp8_per_block"]))


def test_launch_script_must_run_what_was_checked(bundles):
    c = bundles["megatron"]
    assert checks.check_launch(c) == []
    script = c.files["launch.sh"]
    line = "  \"+actor_rollout_ref.actor.optim.override_optimizer_config.fp8_recipe='blockwise'\" \\\n"
    dropped = script.replace(line, "")
    assert dropped != script
    problems = checks.check_launch(dataclasses.replace(c, files={**c.files, "launch.sh": dropped}))
    assert any("other overrides than overrides.yaml" in p for p in problems), problems
    extra = script.replace("export VLLM_USE_DEEP_GEMM_E8M0=0\n", "export VLLM_USE_DEEP_GEMM_E8M0=1\n")
    problems = checks.check_launch(dataclasses.replace(c, files={**c.files, "launch.sh": extra}))
    assert any(p.startswith("launch.sh exports") for p in problems), problems
    # outside a Ray job the bundle must be Ray's working_dir (a shipped reward file is opened from there)
    no_wd = "\n".join(line for line in script.splitlines() if "runtime_env.working_dir=" not in line) + "\n"
    assert no_wd != script
    problems = checks.check_launch(dataclasses.replace(c, files={**c.files, "launch.sh": no_wd}))
    assert any("by hand gives Ray the working_dir []" in p for p in problems), problems
