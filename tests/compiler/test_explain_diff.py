"""explain tells where each FP8 setting went; diff shows two specs as compiled configuration."""

from __future__ import annotations

from tests.conftest import BASE_SPEC, SPECS, patched
from tests.spec.test_bad_inputs import run_cli


def test_explain_maps_fields_to_layers():
    proc = run_cli("explain", str(SPECS / "qwen3-8b.yaml"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    block = out.split("\nkv_cache.dtype\n", 1)[1].split("\n\n", 1)[0]
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype='fp8_e4m3'" in block
    recal = out.split("\nkv_cache.recalibrate\n", 1)[1].split("\n\n", 1)[0]
    assert "runtime patch" in recal and "kv_scales" in recal
    # the activation env var serves both fields that need a patch, so it is listed under both
    both = out.split("\nlinear.sync_quantizer, kv_cache.recalibrate\n", 1)[1].split("\n\n", 1)[0]
    assert "FP8SPEC_RUNTIME_PATCHES=fast_block_quant,kv_scales" in both
    scale = out.split("\nlinear.scale_dtype\n", 1)[1].split("\n\n", 1)[0]
    assert "VLLM_USE_DEEP_GEMM_E8M0=0" in scale and "evidence:" in scale


def test_explain_megatron_training():
    out = run_cli("explain", str(SPECS / "qwen3-30b.yaml")).stdout
    assert "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8='hybrid'" in out
    assert "NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1" in out


def test_diff_shows_only_changes(write_spec):
    a = write_spec(BASE_SPEC, "a.yaml")
    b = write_spec(patched(BASE_SPEC, {"kv_cache": {"dtype": "fp8_e4m3"}, "correction": {"clip": 3.0}}), "b.yaml")
    proc = run_cli("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "- [verl override] algorithm.rollout_correction.rollout_is_threshold=2.0" in lines
    assert "+ [verl override] algorithm.rollout_correction.rollout_is_threshold=3.0" in lines
    assert "+ [verl override] +actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype='fp8_e4m3'" in lines
    assert not any("rollout.name" in ln for ln in lines)
    same = run_cli("diff", str(a), str(a))
    assert "(no difference" in same.stdout
