"""Rule PAR015's evidence, read from the committed SGLang 0.5.12 logs (one H200, 2026-12-02).

The same engine (Qwen3-8B, W8A8 + FP8 KV, the vLLM table's workload: 256 requests of 1,024 prompt tokens, 1,536
output tokens each, ignore_eos) with max_running_requests 256 (verl's rollout.max_num_seqs) and with 257 (the
rule's fix). SGLang logs one "Decode batch, #running-req: N, ... #queue-req: Q" line per 40 decode steps.
"""

from __future__ import annotations

import json
import re
import tarfile

import pytest

from tests.conftest import REPO

RESULTS = REPO / "tests" / "data" / "sglang_run"
RUNS = {
    256: (RESULTS / "sbench_8b_fp8.tgz", "sglang-qwen3-8b-fp8kv-dg0-flashinfer"),
    257: (RESULTS / "par015_8b_fp8kv_mrr257.tgz", "sglang-qwen3-8b-fp8kv-dg0-flashinfer"),
}
DECODE = re.compile(r"Decode batch, #running-req: (\d+),.*#queue-req: (\d+)")


def _run(slots: int) -> tuple[list[tuple[int, int]], dict]:
    path, name = RUNS[slots]
    with tarfile.open(path) as tar:
        members = {m.name.rsplit("/", 1)[-1]: m for m in tar.getmembers()}
        log = tar.extractfile(members[f"{name}.log"]).read().decode(errors="replace")
        record = json.loads(tar.extractfile(members[f"{name}.json"]).read())
    return [(int(a), int(b)) for a, b in DECODE.findall(log)], record


@pytest.fixture(scope="module")
def runs():
    return {slots: _run(slots) for slots in RUNS}


def test_with_verls_256_slots_one_request_waits_and_then_runs_alone(runs):
    decode, record = runs[256]
    assert record["max_running_requests"] == 256 and record["prompts"] == 256
    assert max(r for r, _ in decode) == 255
    assert (255, 1) in decode  # the 256th waits while the others decode
    assert decode[-1] == (1, 0)  # and runs alone at the end: the solo tail


def test_with_257_slots_all_256_run_at_once_and_the_tail_is_gone(runs):
    decode, record = runs[257]
    assert record["max_running_requests"] == 257
    assert max(r for r, _ in decode) == 256
    assert all(q == 0 for _, q in decode) and min(r for r, _ in decode) == 256
    before = runs[256][1]
    assert record["output_tokens"] == before["output_tokens"] == 256 * 1536
    # the rule's claim: the extra wave is gone (50.9 s -> 40.0 s on the H200, docs/results.md#rollout-throughput)
    assert record["generate_s"] < 0.85 * before["generate_s"]
