"""The planner's SGLang pool against six real SGLang 0.5.12 engines at real size.

SGLang's offline engine ran on one H200 with the settings verl 0.9.1 gives an SGLang rollout
(benchmarks/sglang/run_sglang_configs.py; dummy weights, mem_fraction_static 0.6, context 4096), for Qwen3-8B and
Qwen3-30B-A3B in BF16, FP8 W8A8 blockwise and FP8 W8A8 + FP8 KV. The driver's records (SGLang's own log lines:
"Load weight begin/end", "max_total_num_tokens") are committed in tests/data/sglang_run/.
The goal is 5 %; the planner is held to 1 %, which fails without the FP8 dummy-init cache term of
fp8spec/engines/sglang/memory.py (the 30B-A3B FP8 pools were then over-predicted by 2.7 %).
"""

from __future__ import annotations

import importlib.util

import pytest

from fp8spec.catalog import get_model
from fp8spec.plan.facts import gpu_memory
from fp8spec.plan.rollout import Choice, plan_choice
from fp8spec.plan.setup import EngineSetup
from tests.conftest import REPO

RUN = REPO / "tests" / "data" / "sglang_run"
GIB = 1 << 30
MODES = {"bf16": ("bf16", False), "fp8": ("bf16", True), "fp8kv": ("fp8_e4m3", True)}


def _records() -> list[dict]:
    """The engines that started and generated, read by the script docs/results.md's table comes from."""
    script = importlib.import_module("benchmarks.sglang.plan_vs_engine")
    return script.records([str(p) for p in sorted(RUN.glob("sbench_*.tgz"))])


RECORDS = _records()


def _planned(r: dict):
    model = get_model(r["model"])
    kv_dtype, fp8 = MODES[r["mode"]]
    quantized = (
        frozenset(m.name for m in model.linear_modules() if m.kind not in ("lm_head", "router"))
        if fp8
        else None
    )
    mem = gpu_memory("h200")
    setup = EngineSetup(
        engine="sglang",
        engine_version="0.5.12",
        gpu="h200",
        total_bytes=mem.total_bytes,
        sms=mem.sms,
        utilization=r["util"],
        tp=1,
        ep=1,
        max_num_batched_tokens=16384,
        max_num_seqs=256,
        max_model_len=r["max_model_len"],
        cuda_graphs=True,
        kv_dtype=kv_dtype,
        defaults="the bench's settings",
    )
    return plan_choice(
        model,
        setup,
        Choice(r["mode"], r["mode"], quantized, kv_dtype),
        seq_len=r["max_model_len"],
        sequences=1,
    )


def test_the_run_holds_six_engines_that_started_and_generated():
    assert sorted((r["model"].split("/")[-1], r["mode"]) for r in RECORDS) == sorted(
        (m, mode) for m in ("Qwen3-8B-Base", "Qwen3-30B-A3B-Base") for mode in MODES
    )
    assert all(r["output_tokens"] == 256 * 1536 for r in RECORDS)
    assert {r["util"] for r in RECORDS} == {0.6} and {r["max_model_len"] for r in RECORDS} == {4096}


@pytest.mark.parametrize("r", RECORDS, ids=lambda r: f"{r['model'].split('/')[-1]}-{r['mode']}")
def test_planner_within_1_percent_of_sglang_pool(r):
    p = _planned(r)
    tokens = r["max_total_num_tokens"]
    assert abs(p.kv.num_blocks - tokens) / tokens < 0.01, (p.kv.num_blocks, tokens)
    # what the load left used: parameters plus the cached dummy-init blocks (SGLang's "mem usage", GiB to 2 places)
    loaded = (p.weights.total + p.memory.load_cache) / GIB
    assert abs(loaded - r["weights_gib"]) / r["weights_gib"] < 0.01, (loaded, r["weights_gib"])
    assert abs(p.memory.detail["free_before_load"] / GIB - r["free_before_load_gib"]) < 0.05


def test_without_the_dummy_init_term_the_fp8_moe_pool_is_off_by_more_than_2_percent():
    """The term is what brings the FP8 pools in: the same plan minus it misses the 30B-A3B FP8 pool by > 2 %."""
    (r,) = [r for r in RECORDS if r["model"].endswith("30B-A3B-Base") and r["mode"] == "fp8"]
    p = _planned(r)
    assert p.memory.load_cache == 3 * 128 * 1536 * 2048  # float16 + float8 copies of one layer's stacked w13
    per_token = p.kv.bytes_per_token
    without = (p.memory.available_kv + p.memory.load_cache) // per_token
    assert (without - r["max_total_num_tokens"]) / r["max_total_num_tokens"] > 0.02
