"""How large a packed update micro-batch fits (fp8spec/plan/packing.py): the largest token budget whose estimated
training peak leaves the free share, only where packing attends each sequence on its own."""

from __future__ import annotations

import pytest

from tests.conftest import BASE_SPEC, MOE, patched

H200 = {"hardware": {"gpu": "h200"}}
# Qwen3-30B-A3B on 8 H200s, experts over 4, with 3,072-token sequences: the state leaves room to pack
MEGATRON = {"training": {"backend": "megatron", "parallel": {"tp": 2, "ep": 4}},
            "rollout": {"max_prompt_length": 1024, "max_response_length": 2048}}


@pytest.fixture
def plan_of(validate):
    from fp8spec.plan import build_memory_plan

    def run(*patches):
        return build_memory_plan(validate(patched(BASE_SPEC, *patches)).context)

    return run


def _free(plan) -> int:
    from fp8spec.plan.facts import estimate

    return int(plan.total_bytes * float(estimate("trainer", "packing_free_share")[plan.spec.training.backend]))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_budget_is_the_largest_whose_planned_peak_leaves_the_free_share(plan_of, precision):
    from fp8spec.plan.packing import STEP, packing_room

    spec = (MOE, MEGATRON, H200, {"training": {"precision": precision}})
    room = packing_room(plan_of(*spec))
    assert room is not None and room.tokens % STEP == 0 and room.tokens >= room.sequence_tokens
    # the plan at that budget leaves the free share; one step more does not
    at = plan_of(*spec, {"algorithm": {"ppo_max_token_len_per_gpu": room.tokens}})
    over = plan_of(*spec, {"algorithm": {"ppo_max_token_len_per_gpu": room.tokens + STEP}})
    limit = at.total_bytes - _free(at)
    assert at.trainer.state + at.trainer.pass_transients + at.trainer.context <= limit
    assert over.trainer.state + over.trainer.pass_transients + over.trainer.context > limit
    # the same answer whatever the spec's own budget (the per-token cost is linear)
    assert packing_room(at).tokens == room.tokens


def test_no_budget_where_packing_costs_attention_work_or_batches_are_fixed(plan_of):
    from fp8spec.plan.packing import packing_room

    assert packing_room(plan_of({"training": {"attention": "sdpa"}})) is None  # one dense mask (PAR016)
    assert packing_room(plan_of({"training": {"attention": "eager"}})) is None
    assert packing_room(plan_of({"training": {"attention": "flex_attention"}})) is not None
    assert packing_room(plan_of()) is not None  # flash_attention_2, verl's default
    assert packing_room(plan_of({"algorithm": {"use_dynamic_bsz": False}})) is None


def test_a_state_that_leaves_no_room_says_so(plan_of):
    from fp8spec.plan.packing import packing_note, packing_room

    # Qwen3-8B's FSDP state on one 80 GiB GPU: 16 bytes per parameter leave no room for one sequence
    room = packing_room(plan_of({"hardware": {"gpus_per_node": 1}, "rollout": {"tp": 1}}))
    assert room is not None and room.tokens == 0
    assert packing_note(room).startswith("packing: not even one")


def test_plan_prints_the_budget_per_precision_and_in_json(plan_of, validate):
    from fp8spec.plan.packing import packing_room
    from fp8spec.plan.render import plan_json, render_text
    from fp8spec.rules.plan_columns import judged

    ctx = validate(patched(BASE_SPEC, MOE, MEGATRON, H200)).context
    from fp8spec.plan import build_memory_plan

    plan = judged(build_memory_plan(ctx), ctx)
    room = packing_room(plan)
    text = render_text(plan)
    assert f"{room.tokens:,} tok" in text and "note: packing: update micro-batches of up to" in text
    data = plan_json(plan)["trainer"]["packing_room"]
    assert data["update_budget"]["value"] == room.tokens and data["kept_free"]["value"] == room.kept_free
    # the other precision's column is its own: FP8 training's caches are state, its saved linear inputs smaller
    other = packing_room(plan, plan.trainer_other)
    assert plan_json(plan)["trainer_other_precision"]["packing_room"]["update_budget"]["value"] == other.tokens
    assert f"{other.tokens:,} tok" in text and other.tokens != room.tokens


def test_the_budget_stops_at_one_mini_batch_per_gpu(plan_of):
    """Short sequences: a micro-batch cannot hold more than the GPU's share of one mini-batch, so the plan says
    the whole mini-batch fits in one instead of a budget no batch reaches."""
    from fp8spec.plan.packing import packing_note, packing_room

    plan = plan_of({"rollout": {"max_prompt_length": 256, "max_response_length": 256}})
    room = packing_room(plan)
    spec = plan.spec
    per_gpu = -(-spec.algorithm.ppo_mini_batch_size * spec.rollout.n // spec.world_size)
    assert room.whole_mini_batch and room.tokens == per_gpu * 512
    assert f"whole mini-batch's {per_gpu} sequences per GPU ({room.tokens:,} tokens)" in packing_note(room)
    # long sequences do not reach it
    assert not packing_room(plan_of()).whole_mini_batch
