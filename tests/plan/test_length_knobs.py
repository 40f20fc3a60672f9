"""The spec's rollout.max_model_len / max_num_seqs / max_num_batched_tokens drive the planner (in place of
verl's defaults) and are what MEM002 / MEM004 propose, each proposal holding when applied."""

from __future__ import annotations

import json
import re

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, patched

# Qwen3-8B in BF16 on one H100 at 25 %: KV room for 22,528 tokens, not for the model's 32,768
TIGHT = {"rollout": {"tp": 1, "gpu_memory_utilization": 0.25}, "linear": {"quantize": False}}
KNOBS = {"rollout": {"max_model_len": 8192, "max_num_seqs": 32, "max_num_batched_tokens": 2048}}


def _found(result, code):
    return [d for d in result.diagnostics if d.code == code]


def test_plan_reads_the_spec_knobs_and_command_line_wins(write_spec):
    path = write_spec(patched(BASE_SPEC, KNOBS))
    engine = json.loads(run_cli_here("plan", str(path), "-f", "json").stdout)["engine"]
    assert [engine[k]["value"] for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens")] == [
        8192, 32, 2048]
    assert "rollout.max_model_len, rollout.max_num_seqs, rollout.max_num_batched_tokens from the spec" in (
        engine["defaults"])
    over = json.loads(run_cli_here("plan", str(path), "-f", "json", "--max-num-seqs", "16").stdout)["engine"]
    assert over["max_num_seqs"]["value"] == 16 and over["max_model_len"]["value"] == 8192
    plain = json.loads(run_cli_here("plan", str(write_spec(BASE_SPEC, "plain.yaml")), "-f", "json").stdout)["engine"]
    assert [plain[k]["value"] for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens")] == [
        32768, 256, 8192]  # Qwen3-8B's max_position_embeddings and verl's defaults


def test_max_model_len_bounds_the_one_request_kv(validate):
    mem002 = _found(validate(patched(BASE_SPEC, TIGHT)), "MEM002")
    assert mem002 and "one request of 32768 tokens" in mem002[0].message
    assert "rollout.max_model_len: 22528" in mem002[0].hint  # prompt + response, proposed
    fixed = validate(patched(BASE_SPEC, TIGHT, {"rollout": {"max_model_len": 22528}}))
    assert not _found(fixed, "MEM002") and not fixed.errors


def test_mem004_proposes_fewer_running_sequences_that_hold(validate):
    spec = patched(BASE_SPEC, TIGHT, {"rollout": {"gpu_memory_utilization": 0.35}})
    mem004 = _found(validate(spec), "MEM004")
    assert mem004, "the tight spec must preempt heavily"
    seqs = [int(n) for n in re.findall(r"rollout\.max_num_seqs: (\d+)", mem004[0].hint)]
    assert seqs and "passes every rule" in mem004[0].hint
    after = validate(patched(spec, {"rollout": {"max_num_seqs": seqs[0]}}))
    assert not _found(after, "MEM004") and not after.errors
    # well above the proposal the cache preempts again: the proposal is not just any lower number
    assert _found(validate(patched(spec, {"rollout": {"max_num_seqs": 2 * seqs[0] + 2}})), "MEM004")


def test_own_max_model_len_below_prompt_plus_response_is_mdl002(validate):
    result = validate(patched(BASE_SPEC, {"rollout": {"max_model_len": 16384}}))
    found = _found(result, "MDL002")
    assert found and "exceeds rollout.max_model_len 16384" in found[0].message
    assert "rollout.max_model_len: 22528" in found[0].hint
    fixed = validate(patched(BASE_SPEC, {"rollout": {"max_model_len": 22528}}))
    assert not _found(fixed, "MDL002") and not fixed.errors
