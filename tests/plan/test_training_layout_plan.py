"""`fp8spec plan` and `fp8spec explain` with a training precision layout: the measured trainer speed per layout,
a module class trained in another precision than the rollout runs it, and the FP8 weight cache of BF16 experts."""

from __future__ import annotations

import json

import pytest

from tests.conftest import BASE_SPEC, MEGATRON_FP8, MOE, patched

H200 = {"hardware": {"gpu": "h200"}}
EXPERTS_BF16 = {"training": {"bf16_modules": ["experts"]}}


@pytest.fixture
def plan_of(validate):
    from fp8spec.plan import build_memory_plan
    from fp8spec.rules.plan_columns import judged

    def run(*patches):  # judged by the rules, as `fp8spec plan` prints it
        ctx = validate(patched(BASE_SPEC, *patches)).context
        return judged(build_memory_plan(ctx), ctx)

    return run


def test_plan_lists_the_layouts_and_names_the_experts_trained_bf16_but_rolled_out_fp8(plan_of):
    from fp8spec.plan.render import render_json, render_text

    plan = plan_of(MOE, MEGATRON_FP8, H200, EXPERTS_BF16)
    text = render_text(plan)
    assert "fp8 blockwise + experts BF16 0.94x (this spec's)" in text
    assert "training layout differs from the rollout: experts trained BF16, rolled out FP8;" in text
    assert "measured:mismatch.megatron_vllm.bf16_train_fp8_rollout_k3" in text
    # the layout's own measured mismatch (k3 KL at step 1 -> 5), quoted beside the two whole-model recipes
    assert "1.0e-03 -> 3.1e-04 with the experts trained BF16 and rolled out FP8" in text
    data = json.loads(render_json(plan))
    assert "experts trained BF16, rolled out FP8" in data["layout_mismatch"]
    assert data["trainer_layouts"].startswith("trainer speed per layout vs BF16 (GPU time")


def test_plan_names_no_mismatch_when_the_rollout_keeps_the_experts_bf16_too(plan_of):
    from fp8spec.plan.render import render_text

    rollout = {"linear": {"exclude": ["router", "lm_head", "mlp.experts.*"]}}
    plan = plan_of(MOE, MEGATRON_FP8, H200, EXPERTS_BF16, rollout)
    assert plan.layout_mismatch() == ""
    assert "training layout differs" not in render_text(plan)


def test_bf16_experts_hold_no_fp8_weight_cache(plan_of):
    fp8 = plan_of(MOE, MEGATRON_FP8, H200).trainer
    layout = plan_of(MOE, MEGATRON_FP8, H200, EXPERTS_BF16).trainer
    assert 0 < layout.fp8_weight_cache < fp8.fp8_weight_cache / 10  # the experts are most of the model
    assert layout.params == fp8.params


def test_explain_notes_the_mismatch_and_the_padding_bf16_experts_still_pay(validate):
    from fp8spec.compiler.build import build_settings_plan, choose_backend

    fits = {
        "hardware": {"nodes": 2},
        "training": {"parallel": {"ep": 8}, "offload": {"params": True, "optimizer": True}},
    }
    validation = validate(patched(BASE_SPEC, MOE, MEGATRON_FP8, H200, EXPERTS_BF16, fits))
    assert not validation.errors, [(d.code, d.message) for d in validation.errors]
    plan = build_settings_plan(validation.valid(), choose_backend(None, validation))
    notes = " | ".join(plan.notes)
    assert "experts trained BF16, rolled out FP8" in notes
    assert "still pads each expert's tokens to a multiple of 16" in notes
