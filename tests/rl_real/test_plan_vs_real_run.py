"""`fp8spec plan` against the first real-size RL step (docs/results.md#planner-accuracy).

The FP8 W8A8 + FP8 KV bundle of the Qwen3-4B shape ran one step of verl 0.9.1's main_ppo on an H200 (2026-12-02);
its log and nvidia-smi samples are committed. The planner's figures for the same spec must stay within the
goals of what that run showed: KV cache capacity within 5 %, the trainer's peak within 15 %.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, require

require("ruamel.yaml")
from benchmarks.rl_real import plan_predictions as pp  # noqa: E402  (after the skip: it imports ruamel.yaml)
from benchmarks.rl_real import summarize_real as sr  # noqa: E402

RUN = REPO / "tests/data/rl_real/real-4b-h200-fp8kv"
BUNDLE = RUN.name


@pytest.fixture(scope="module")
def measured() -> dict:
    return sr.compare(BUNDLE, sr.read([RUN])[BUNDLE], {})


@pytest.fixture(scope="module")
def planned() -> dict:
    # the spec as it ran (the committed run's folder keeps it; the generated specs have moved on since)
    return pp.summary(pp._plan(RUN / "spec.yaml"))


def test_the_committed_run_reads_as_benchmarks_quotes(measured):
    assert measured["loop_kv_cache_tokens"] == 1_351_808
    assert measured["trainer_torch_peak_reserved_gib"] == pytest.approx(82.09, abs=0.01)
    assert round(measured["loop_gen_tok_s"][1]) == 9618


def test_planned_kv_capacity_within_5_percent(measured, planned):
    run = measured["loop_kv_cache_tokens"]
    assert abs(planned["kv_cache_tokens"] / run - 1) < 0.05, (planned["kv_cache_tokens"], run)


def test_planned_trainer_peak_within_15_percent(measured, planned):
    run = measured["trainer_torch_peak_reserved_gib"]
    assert abs(planned["trainer_peak_gib"] / run - 1) < 0.15, (planned["trainer_peak_gib"], run)


def test_planned_no_preemption_and_none_reported(measured, planned):
    assert planned["preempts"] is False
    assert all(not p for p in measured["preempted_per_request"])


def test_predictions_file_matches_the_planner():
    recorded = json.loads((REPO / "benchmarks/rl_real/plan_predictions.json").read_text(encoding="utf-8"))
    current = pp.summary(pp._plan(pp.SPECS / f"{BUNDLE}.yaml"))
    assert recorded["specs"][BUNDLE]["kv_cache_tokens"] == current["kv_cache_tokens"]
