"""The field's FP8-RL pain points as rules, beyond their bad/good examples (which the generic
test of tests/rules/test_rules.py runs): the reported cases, the re-validated fixes, the evidence switches."""

from __future__ import annotations

from fp8spec.rules.registry import get_rule
from tests.conftest import BASE_SPEC, MOE, patched
from tests.rules.test_proposals import _check_proposals

QWEN25 = {"model": {"name": "Qwen/Qwen2.5-7B", "path": "/models/Qwen2.5-7B"}}
LLAMA = {"model": {"name": "meta-llama/Llama-3.1-8B", "path": "/models/Llama-3.1-8B"}}
DSV2 = {"model": {"name": "deepseek-ai/DeepSeek-V2-Lite", "path": "/models/DeepSeek-V2-Lite"}}
FP8_KV = {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}


def _found(validation, code):
    return [d for d in validation.diagnostics if d.code == code]


# ---- KV008: FP8 KV cache on a model without QK-norm -----------------------------------------------------------


def test_kv008_fires_on_qwen25_with_fp8_kv_and_proposes_bf16_kv(validate):
    data = patched(BASE_SPEC, QWEN25, FP8_KV)
    (d,) = _found(validate(data), "KV008")
    assert d.severity == "warning" == get_rule("KV008").severity
    assert d.path == "kv_cache.dtype" and d.line >= 1
    assert "Qwen/Qwen2.5-7B (Qwen2ForCausalLM)" in d.message and "no QK-norm" in d.message
    assert "Qwen/Qwen2.5-Math-7B" in d.message  # the reported case, read from the verl profile
    assert "kv_cache.dtype: bf16" in d.hint
    assert _check_proposals(validate, data, "KV008") == 1  # bf16 KV, re-validated from the file


def test_kv008_fires_on_llama(validate):
    assert _found(validate(patched(BASE_SPEC, LLAMA, FP8_KV)), "KV008")


def test_kv008_quiet_on_qwen3_with_qk_norm_and_on_a_bf16_cache(validate):
    assert not _found(validate(patched(BASE_SPEC, FP8_KV)), "KV008")  # Qwen3-8B-Base has q_norm/k_norm
    assert not _found(validate(patched(BASE_SPEC, QWEN25, {"kv_cache": {"dtype": "bf16"}})), "KV008")


def test_kv008_quiet_on_mla(validate):
    """MLA caches a normalized latent; the report covers per-head attention only."""
    data = patched(BASE_SPEC, DSV2, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}})
    assert not _found(validate(data), "KV008")


def test_kv008_acknowledged_is_information(validate):
    data = patched(BASE_SPEC, QWEN25, FP8_KV, {"acknowledge": {"KV008": "checked against a BF16-KV run"}})
    (d,) = _found(validate(data), "KV008")
    assert d.severity == "info"


# ---- BLK007: an FP8 MoE kernel that re-lays the experts after loading, which the weight sync does not redo -----

MOE_EP = [MOE, {"rollout": {"tp": 2, "ep": 2}}]


def test_blk007_fires_for_expert_parallel_block_fp8_on_hopper(validate):
    data = patched(BASE_SPEC, *MOE_EP)
    (d,) = _found(validate(data), "BLK007")
    assert d.severity == "error" and d.path == "rollout.ep"
    assert "FLASHINFER_CUTLASS" in d.message and "gate and up exchanged" in d.message
    assert d.hint.startswith("set rollout.ep: 1")
    assert _check_proposals(validate, data, "BLK007") == 1


def test_blk007_quiet_for_tensor_parallel_experts(validate):
    assert not _found(validate(patched(BASE_SPEC, MOE, {"rollout": {"tp": 2, "ep": 1}})), "BLK007")


def test_blk007_quiet_when_the_experts_stay_bf16_or_nothing_is_quantized(validate):
    bf16_experts = {"linear": {"exclude": ["lm_head", "embeddings", "norms", "router", "*.mlp.experts.*"]}}
    assert not _found(validate(patched(BASE_SPEC, *MOE_EP, bf16_experts)), "BLK007")
    assert not _found(validate(patched(BASE_SPEC, *MOE_EP, {"linear": {"quantize": False}})), "BLK007")


def test_blk007_quiet_where_the_sync_path_re_runs_the_processing(validate, monkeypatch):
    """A verl whose sync re-processes same-shape relayouts (the profile fact) makes the kernel safe."""
    from fp8spec.resolve.context import ResolvedSpec

    fact = ResolvedSpec.fact

    def reprocessing(self, kind, fact_id, default=None):
        if fact_id == "capability.vllm_fp8_refit_reprocess":
            return {"same_shape_relayout": True}
        return fact(self, kind, fact_id, default)

    monkeypatch.setattr(ResolvedSpec, "fact", reprocessing)
    assert not _found(validate(patched(BASE_SPEC, *MOE_EP)), "BLK007")


# ---- TRN007 and `plan`: the trainer-side FP8 figure, only for the model class and GPU generation measured ---------

MIXTRAL = {"model": {"name": "mistralai/Mixtral-8x7B-v0.1", "path": "/models/Mixtral-8x7B-v0.1"}}
MEGATRON_FP8 = {"training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 2}}}


def _plan(validate, *patches):
    """The plan as `fp8spec plan` prints it."""
    from fp8spec.plan import build_memory_plan
    from fp8spec.rules.plan_columns import judged

    ctx = validate(patched(BASE_SPEC, *patches)).context
    return judged(build_memory_plan(ctx), ctx)


def test_plan_shows_the_measured_moe_layer_cost_and_trn007_warns(validate):
    from fp8spec.plan.render import plan_json, render_text

    plan = _plan(validate, MOE, MEGATRON_FP8)
    assert plan_json(plan)["trainer_fp8_layer_speed"]["measured"] is True
    assert plan_json(plan)["trainer_fp8_layer_speed"]["ratio_vs_bf16"]["value"] < 1  # 0.81x at 22K tokens
    assert "0.81x @ 22K tok" in render_text(plan)
    assert _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8)), "TRN007")


def test_an_unmeasured_architecture_says_not_measured_and_trn007_is_quiet(validate):
    """Mixtral's eight 14336-wide experts are not the measured Qwen3-30B-A3B layer: no figure is carried over."""
    from fp8spec.plan.render import plan_json, render_text

    plan = _plan(validate, MIXTRAL, MEGATRON_FP8)
    speed = plan_json(plan)["trainer_fp8_layer_speed"]
    assert speed["measured"] is False and "MixtralForCausalLM layers were not measured" in speed["why"]
    text = render_text(plan)
    assert "not measured" in text and "0.81x" not in text and "0.64x" not in text
    assert not _found(validate(patched(BASE_SPEC, MIXTRAL, MEGATRON_FP8)), "TRN007")


def test_another_gpu_generation_or_recipe_is_not_measured(validate):
    from fp8spec.plan.render import plan_json

    blackwell = {"hardware": {"gpu": "b200"}, "linear": {"scale_dtype": "ue8m0"}}
    speed = plan_json(_plan(validate, MOE, MEGATRON_FP8, blackwell))["trainer_fp8_layer_speed"]
    assert speed["measured"] is False and "not measured on blackwell GPUs" in speed["why"]
    assert not _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, blackwell)), "TRN007")
    delayed = {"training": {"fp8_scaling": "delayed"}}
    speed = plan_json(_plan(validate, MOE, MEGATRON_FP8, delayed))["trainer_fp8_layer_speed"]
    assert speed["measured"] is False and "the delayed recipe was not measured" in speed["why"]


def test_fsdp_trainer_has_no_fp8_layer_row(validate):
    from fp8spec.plan.render import plan_json

    assert plan_json(_plan(validate, MOE))["trainer_fp8_layer_speed"] is None


# ---- BLK008: SGLang re-lays block-FP8 weights after loading on Blackwell; its weight update never redoes it ------

SGLANG_B200 = {"rollout": {"engine": "sglang"}, "hardware": {"gpu": "b200"}, "linear": {"scale_dtype": "ue8m0"}}


def test_blk008_fires_for_fp8_on_sglang_on_blackwell(validate):
    data = patched(BASE_SPEC, SGLANG_B200)
    (d,) = _found(validate(data), "BLK008")
    assert d.severity == "error" and d.path == "linear.quantize"
    assert "deep_gemm_ue8m0" in d.message and "SGLang 0.5.12" in d.message
    assert "rollout.engine: vllm" in d.hint
    assert _check_proposals(validate, data, "BLK008") == 2  # vLLM, or no FP8 linears: both re-validated


def test_blk008_quiet_on_hopper_without_fp8_linears_and_on_vllm(validate):
    assert not _found(validate(patched(BASE_SPEC, {"rollout": {"engine": "sglang"}})), "BLK008")  # h100
    assert not _found(validate(patched(BASE_SPEC, SGLANG_B200, {"linear": {"quantize": False}})), "BLK008")
    assert not _found(validate(patched(BASE_SPEC, SGLANG_B200, {"rollout": {"engine": "vllm"}})), "BLK008")
