"""MEM007's arithmetic: what shares the GPU at a colocated weight sync (verl 0.9.1 engine_workers.py:766-782)."""

from __future__ import annotations

import pytest

from tests.conftest import BASE_SPEC, patched


@pytest.fixture
def plan_of(validate):
    from fp8spec.plan import build_memory_plan

    def run(*patches):
        return build_memory_plan(validate(patched(BASE_SPEC, *patches)).context)

    return run


def _verdict(plan):
    from fp8spec.plan.feasibility import sync_bucket

    return sync_bucket(plan)


def test_the_bucket_is_verls_2048_mib_unless_the_spec_sets_one(plan_of):
    assert plan_of().setup.sync_bucket_bytes == 2048 << 20  # the verl profile's default, not a constant here
    assert plan_of({"rollout": {"sync_bucket_mb": 8192}}).setup.sync_bucket_bytes == 8192 << 20


def test_offloaded_parameters_come_back_for_the_sync(plan_of):
    kept, off = plan_of(), plan_of({"training": {"offload": {"params": True}}})
    # during rollout the offloaded parameters are gone; at the sync they are sent from the GPU again
    assert off.trainer.resident_during_rollout < kept.trainer.resident_during_rollout
    assert _verdict(off).numbers["used"] == _verdict(kept).numbers["used"]
    optimizer_off = plan_of({"training": {"offload": {"optimizer": True}}})
    assert kept.trainer.optimizer > 0
    assert _verdict(kept).numbers["used"] - _verdict(optimizer_off).numbers["used"] == kept.trainer.optimizer


def test_the_verdict_turns_at_the_room_it_reports(plan_of):
    plan = plan_of({"rollout": {"sync_bucket_mb": 65536}})
    verdict = _verdict(plan)
    assert not verdict.ok and "rollout.sync_bucket_mb" in verdict.message
    fit = dict(verdict.advice[0].changes)["rollout.sync_bucket_mb"]
    assert 2048 < fit < 65536
    assert _verdict(plan_of({"rollout": {"sync_bucket_mb": fit}})).ok
    # the proposal keeps the stated headroom (2 GiB, memory_estimates.yaml proposals) below where the verdict turns
    assert _verdict(plan_of({"rollout": {"sync_bucket_mb": fit + 2048}})).ok
    assert not _verdict(plan_of({"rollout": {"sync_bucket_mb": fit + 2048 + 512}})).ok


def test_mem007_gives_way_to_mem003_when_the_trainer_does_not_fit_beside_the_engine(plan_of, validate):
    # the trainer's state and the engine's share already overflow the GPU: one finding says so, not two
    patch = {"rollout": {"gpu_memory_utilization": 0.9, "sync_bucket_mb": 65536}}
    plan = plan_of(patch)
    from fp8spec.plan.feasibility import colocation

    assert not colocation(plan).ok and not _verdict(plan).ok
    codes = {d.code for d in validate(patched(BASE_SPEC, patch)).errors}
    assert "MEM003" in codes and "MEM007" not in codes
    assert [v.code for v in plan.failing()].count("MEM007") == 0
