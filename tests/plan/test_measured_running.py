"""The plan says when its quoted speed-ups were measured at another concurrency than the spec runs."""

from __future__ import annotations

from fp8spec.plan.plan import spec_memory_plan
from fp8spec.plan.render import plan_json, render_text
from fp8spec.rules.plan_columns import judged
from tests.conftest import BASE_SPEC, patched

MEASURED = 256  # sequences running at once in every measurement behind expected_gains.yaml


def test_capped_concurrency_is_named_beside_the_speed_ups(validate):
    ctx = validate(patched(BASE_SPEC, {"rollout": {"max_num_seqs": 16}})).context
    plan = judged(spec_memory_plan(ctx), ctx)
    assert plan.spec_rollout.running == 16
    text = render_text(plan)
    assert "speed-up source" in text
    assert f"measured with {MEASURED} sequences running at once" in text and "this spec runs 16 per replica" in text
    assert "this spec runs 16" in plan_json(plan)["sources"]["expected_gain_running"]


def test_no_caveat_at_the_measured_concurrency(validate):
    ctx = validate(patched(BASE_SPEC, {"rollout": {"max_num_seqs": MEASURED, "n": 32}})).context
    plan = judged(spec_memory_plan(ctx), ctx)
    assert plan.spec_rollout.running == MEASURED
    assert "sequences running at once" not in render_text(plan)
