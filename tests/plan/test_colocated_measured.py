"""What the trainer keeps beside a colocated engine, planned against real runs (verl 0.9.1 main_ppo on one H200,
vLLM 0.24.0 colocated; nvidia-smi per process each second, tests/data/plan/colocated/): the plan covers the
trainer's memory while the engine generates and the engine process's own, and refuses the share that could not
wake up at step 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from benchmarks.rl_real.summarize_real import gpu_peaks
from fp8spec.plan import build_memory_plan
from fp8spec.plan.facts import engine_beyond_share

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "plan" / "colocated"
SPECS = REPO / "benchmarks" / "rl_real" / "specs"
MIB, GIB = 1 << 20, 1 << 30
# run folder -> (the spec it ran, the engine share it ran at)
RUNS = {"moe9l-fp8-rollout": ("real-moe9l-h200-fp8-rollout", 0.15), "4b-bf16": ("real-4b-h200-bf16", 0.5)}


def _spec(name: str, utilization: float) -> dict:
    data = YAML(typ="safe").load((SPECS / f"{name}.yaml").read_text(encoding="utf-8"))
    # the spec's relative files, from wherever the test writes it
    data["model"]["config_path"] = str((SPECS / data["model"]["config_path"]).resolve())
    reward = data["reward"]["custom_function"]
    reward["path"] = str((SPECS / reward["path"]).resolve())
    data["rollout"]["gpu_memory_utilization"] = utilization
    return data


def _plan(validate, data: dict):
    result = validate(data)
    return result, build_memory_plan(result.context)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_plan_covers_what_the_run_kept_beside_the_engine(run, validate):
    name, utilization = RUNS[run]
    peaks = gpu_peaks(DATA / run)
    _, plan = _plan(validate, _spec(name, utilization))
    kept, planned = peaks["trainer_beside_engine_mib"] * MIB, plan.trainer.resident_during_rollout
    # covered, and not by a margin that would shrink the engine for nothing
    assert kept <= planned <= kept + 0.01 * plan.total_bytes, (run, kept / GIB, planned / GIB)
    engine = peaks["engine_mib"] * MIB
    planned_engine = plan.spec_rollout.memory.requested + engine_beyond_share("vllm")
    assert engine <= planned_engine <= engine + GIB, (run, engine / GIB, planned_engine / GIB)


def test_the_share_that_could_not_wake_at_step_2_is_refused(validate):
    log = (DATA / "moe9l-util0.23-oom.log").read_text(encoding="utf-8")
    assert "out of memory at /workspace/csrc/cumem_allocator.cpp" in log  # the run at 0.23, step 2's wake-up
    refused, _ = _plan(validate, _spec("real-moe9l-h200-fp8-rollout", 0.23))
    assert [d.code for d in refused.errors] == ["MEM003"]
    assert "measured beyond them" in refused.errors[0].message
    ran, _ = _plan(validate, _spec("real-moe9l-h200-fp8-rollout", 0.15))
    assert not ran.errors
