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
