"""The plan says when the spec's BF16 engine already holds every sequence of the step: the quoted speed-ups came
from BF16 engines that preempted, and the RL loop measured FP8 at +0.6 % where BF16 held them all."""

from __future__ import annotations

import pytest

from fp8spec.plan.facts import measured
from fp8spec.plan.plan import spec_memory_plan
from fp8spec.plan.render import plan_json, render_text
from fp8spec.rules.plan_columns import judged
from tests.conftest import BASE_SPEC, patched

SHORT = {"rollout": {"max_response_length": 2048, "max_prompt_length": 1024}}


def _plan(validate, *patches):
    ctx = validate(patched(BASE_SPEC, *patches)).context
    return judged(spec_memory_plan(ctx), ctx)


def test_a_bf16_engine_that_holds_the_step_gets_the_loop_measurement(validate):
    plan = _plan(validate, SHORT)  # 8B on H100 x 8, TP 2: 128 sequences of 3K tokens per replica fit in BF16
    bf16 = plan.bf16_rollout
    assert bf16 is not None and bf16.fits_without_preemption
    text = render_text(plan)
    line = next(ln for ln in text.splitlines() if "already holds this step's" in ln)
    assert f"holds this step's {bf16.running} sequences at full length ({bf16.concurrency:.1f} fit)" in line
    assert f"Measured where BF16 held them all: {measured('real_step.window_base.fp8kv_gen_gain'):+.1%}" in line
    assert "+0.6%" in line
    assert plan_json(plan)["sources"]["expected_gain_capacity"] in line


def test_a_bf16_engine_that_preempts_gets_no_note(validate):
    plan = _plan(validate)  # 128 sequences of 22.5K tokens per replica: more than BF16's KV cache holds
    assert plan.bf16_rollout is not None and not plan.bf16_rollout.fits_without_preemption
    assert "already holds this step's" not in render_text(plan)
    assert plan_json(plan)["sources"]["expected_gain_capacity"] == ""


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_note_rides_with_the_speed_ups_only(validate, engine):
    """A spec whose engine and model no measurement covers quotes no speed-up, so no note about one either."""
    plan = _plan(validate, SHORT, {"rollout": {"engine": engine}})
    has_gain = any(plan.gain(r) is not None for r in plan.rollout)
    assert ("already holds this step's" in render_text(plan)) == (
        has_gain and plan.bf16_rollout.fits_without_preemption
    )
