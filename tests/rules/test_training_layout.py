"""The training precision layout (training.bf16_modules) through the rules: TRN007's per-layout figures and advice,
the classes a model has (TRN009), and where the trained and the rolled-out precision of a class differ."""

from __future__ import annotations

import pytest

from fp8spec.plan.precision_layout import class_mismatches, layout_speeds, recommended, rollout_precision
from fp8spec.rules.examples import MEGATRON_FP8, MOE
from tests.conftest import BASE_SPEC, patched

H200 = {"hardware": {"gpu": "h200"}}


def _found(result, code):
    return [d for d in result.diagnostics if d.code == code]


def test_trn007_without_a_layout_keeps_its_message_and_lists_every_measured_layout(validate):
    result = validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200))
    (d,) = _found(result, "TRN007")
    assert d.message.startswith("training.precision fp8 (blockwise) measured at 0.81x BF16's layer speed")
    assert (
        "bf16 1.00x, fp8 blockwise 0.82x (this spec's), fp8 tensorwise 0.89x, fp8 blockwise + attention BF16 0.81x, "
        in d.hint
    )
    assert "fp8 blockwise + experts BF16 0.94x" in d.hint
    # the default priority keeps the rollout's precision per class: every class rolls out FP8
    assert "fastest that keeps training.priority mismatch: fp8 blockwise (this spec's)" in d.hint


def test_trn007_recommends_bf16_training_for_speed_on_the_moe_class(validate):
    result = validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200, {"training": {"priority": "speed"}}))
    (d,) = _found(result, "TRN007")
    assert "fastest that keeps training.priority speed: bf16. " in d.hint


def test_trn007_judges_a_layout_by_its_own_figure(validate):
    layout = {"training": {"bf16_modules": ["experts"]}}
    (d,) = _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200, layout)), "TRN007")
    assert d.message.startswith(
        "training layout fp8 blockwise + experts BF16 measured at 0.94x BF16 training"
    )
    assert d.path == "training.bf16_modules"
    # the dense class gains with attention in BF16 (1.19x): no finding
    dense = {"training": {"bf16_modules": ["attention"]}}
    assert _found(validate(patched(BASE_SPEC, MEGATRON_FP8, H200, dense)), "TRN007") == []


def test_mismatch_priority_follows_the_rollouts_excluded_experts(validate):
    spec = patched(
        BASE_SPEC, MOE, MEGATRON_FP8, H200, {"linear": {"exclude": ["router", "lm_head", "mlp.experts.*"]}}
    )
    ctx = validate(spec).context
    assert rollout_precision(ctx) == {"attention": "fp8", "experts": "bf16"}
    best = recommended(ctx, layout_speeds(ctx.known_model, ctx.gpu.arch))
    assert best is not None and best.label == "fp8 blockwise + experts BF16"


@pytest.mark.parametrize(
    "layout,exclude,expected",
    [
        (["experts"], ["router"], [("experts", "bf16", "fp8")]),
        (["experts"], ["router", "mlp.experts.*"], []),
        ([], ["router", "mlp.experts.*"], [("experts", "fp8", "bf16")]),
        (["attention"], ["router", "re:.*layers\\.0\\.self_attn\\.o_proj"], [("attention", "bf16", "mixed")]),
    ],
)
def test_class_mismatches_name_each_class_trained_and_rolled_out_differently(
    validate, layout, exclude, expected
):
    spec = patched(
        BASE_SPEC,
        MOE,
        MEGATRON_FP8,
        H200,
        {"training": {"bf16_modules": layout}, "linear": {"exclude": exclude}},
    )
    ctx = validate(spec).context
    assert [(m.cls, m.trained, m.rolled) for m in class_mismatches(ctx)] == expected


def test_bf16_training_is_not_a_layout_mismatch(validate):
    ctx = validate(
        patched(BASE_SPEC, MOE, {"training": {"backend": "megatron", "precision": "bf16"}})
    ).context
    assert class_mismatches(ctx) == []


@pytest.mark.parametrize(
    "model,layout,absent",
    [
        ({}, ["experts", "shared_experts"], ["experts", "shared_experts"]),  # Qwen3-8B: dense
        (
            MOE,
            ["dense_mlp", "shared_experts"],
            ["dense_mlp", "shared_experts"],
        ),  # Qwen3-30B-A3B: all MoE, no shared
        (MOE, ["attention", "experts"], []),
    ],
)
def test_trn009_names_each_class_the_model_lacks(validate, model, layout, absent):
    result = validate(patched(BASE_SPEC, model, MEGATRON_FP8, {"training": {"bf16_modules": layout}}))
    named = [c for c in layout if any(f"names {c}," in d.message for d in _found(result, "TRN009"))]
    assert named == absent


@pytest.mark.parametrize(
    "training", [{"backend": "fsdp", "precision": "bf16"}, {"backend": "megatron", "precision": "bf16"}]
)
def test_trn008_refuses_a_layout_without_fp8_megatron_training_at_the_field(validate, training):
    result = validate(patched(BASE_SPEC, {"training": {**training, "bf16_modules": ["attention"]}}))
    (d,) = _found(result, "TRN008")
    assert d.path == "training.bf16_modules" and d.severity == "error" and d.line is not None


@pytest.mark.parametrize(
    ("patches", "why"),
    [
        ((MOE, MEGATRON_FP8, H200, {"training": {"bf16_modules": ["experts"]}}), None),
        ((MOE, MEGATRON_FP8, H200, {"training": {"precision": "bf16"}}), None),
        ((MOE, MEGATRON_FP8, H200), "trains the experts in FP8"),
        ((MEGATRON_FP8, H200, {"training": {"precision": "bf16"}}), "has no experts"),
        ((MOE, MEGATRON_FP8, {"hardware": {"gpu": "b200"}, "training": {"precision": "bf16"}}), "9.0 only"),
        ((MOE, {"training": {"precision": "bf16"}}), "the fsdp trainer has no TransformerEngine grouped GEMM"),
    ],
)
def test_trn013_names_why_the_cutlass_grouped_gemm_would_not_run(validate, patches, why):
    result = validate(patched(BASE_SPEC, *patches, {"training": {"expert_gemm": "cutlass"}}))
    found = _found(result, "TRN013")
    if why is None:
        assert not found
    else:
        (d,) = found
        assert why in d.message and d.path == "training.expert_gemm" and d.severity == "warning"


def test_expert_gemm_cutlass_reaches_every_worker_and_bf16_experts_are_told_of_it(validate):
    from fp8spec.compiler.build import build_settings_plan, choose_backend

    def plan_of(*patches):
        # offloaded at tp 4: the 30B training state leaves the engine room
        bf16 = {"training": {"precision": "bf16", "parallel": {"tp": 4}, "offload": {"params": True, "optimizer": True}}}
        v = validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200, bf16, *patches))
        assert not v.errors, [d.render() for d in v.errors]
        return build_settings_plan(v.valid(), choose_backend(None, v))

    cutlass = plan_of({"training": {"expert_gemm": "cutlass"}})
    (env,) = [s for s in cutlass.settings if s.key == "NVTE_USE_CUTLASS_GROUPED_GEMM"]
    assert env.layer == "env" and env.value == "1" and env.source == "training.expert_gemm"
    assert "cublaslt_gemm.cu" in env.evidence
    assert not any("one cuBLAS GEMM per expert" in n for n in cutlass.notes)
    default = plan_of()
    assert not any(s.key == "NVTE_USE_CUTLASS_GROUPED_GEMM" for s in default.settings)
    # the default BF16 experts hear what the measured alternative gave
    assert any("training.expert_gemm: cutlass ran the BF16" in n for n in default.notes)


def test_trn007_judges_experts_bf16_on_the_cutlass_grouped_gemm_by_its_wall_clock_figure(validate):
    layout = {"training": {"bf16_modules": ["experts"]}}
    (d,) = _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200, layout)), "TRN007")
    assert "measured 1.06x BF16 in wall clock" in d.hint  # the kernel the layout is fast with is named
    cutlass = {"training": {"bf16_modules": ["experts"], "expert_gemm": "cutlass"}}
    assert not _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200, cutlass)), "TRN007")
    # the figure is Hopper's: elsewhere the GPU-time figure judges the layout as before
    b200 = {"hardware": {"gpu": "b200"}}
    assert not any("wall clock" in (d.hint or "") for d in _found(
        validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, b200, cutlass)), "TRN007"))


def test_trn007_quotes_the_whole_rl_step_on_hopper_only(validate):
    """The loop's figure (end-to-end FP8 against BF16 training with the same FP8 rollout, 9 MoE layers on one H200)
    is read from measured.yaml and joins the message for an MoE on Hopper; elsewhere the message has none."""
    from fp8spec.plan.facts import measured

    (d,) = _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200)), "TRN007")
    update, step = measured("real_step.moe9l_variants.update_s"), measured("real_step.moe9l_variants.step_s")
    assert f"its update took {update[2] / update[1]:.2f}x and its step {step[2] / step[1]:.2f}x as long" in d.message
    assert "2.05x" in d.message and "1.90x" in d.message
    assert "measured:real_step.moe9l_variants.step_s" in d.message
    blackwell = {"hardware": {"gpu": "b200"}, "linear": {"scale_dtype": "ue8m0"}}
    assert all("RL loop" not in f.message
               for f in _found(validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, blackwell)), "TRN007"))
