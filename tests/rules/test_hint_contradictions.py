"""Cases of hints that contradicted themselves, each with the right answer now (the property test,
test_hint_promises.py, covers the general claim)."""

from __future__ import annotations

import re

from fp8spec.plan.plan import spec_memory_plan
from tests.conftest import BASE_SPEC, patched
from tests.rules.test_hint_promises import DEEPSEEK

SGLANG = {"rollout": {"engine": "sglang"}}


def _one(result, code):
    found = [d for d in result.diagnostics if d.code == code]
    assert found, f"{code} did not fire: {[d.render() for d in result.diagnostics]}"
    return found[0]


def _fix_lines(result) -> dict[str, str]:
    from fp8spec.plan.render import fix_lines
    from fp8spec.rules.plan_columns import judged

    return dict(fix_lines(judged(spec_memory_plan(result.context), result.context)))


def test_mem004_with_fp8_kv_already_does_not_propose_fp8_kv(validate):
    spec = patched(BASE_SPEC, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"},
                               "rollout": {"tp": 1, "gpu_memory_utilization": 0.3}})
    found = _one(validate(spec), "MEM004")
    assert "kv_cache.dtype" not in found.hint and "rollout.max_num_seqs" in found.hint


def test_mem004_does_not_propose_an_fp8_kv_cache_kv008_warns_of(validate):
    """A proposal is a promise: on a model without QK-norm (Llama) an FP8 KV cache draws KV008, whose own
    proposal is bf16, so MEM004 proposes the next way out (max_num_seqs) instead."""
    llama = {"model": {"name": "meta-llama/Llama-3.1-8B", "path": "/models/llama"}}
    spec = patched(BASE_SPEC, llama, {"kv_cache": {"dtype": "bf16"},
                                      "rollout": {"tp": 1, "gpu_memory_utilization": 0.7, "max_model_len": 22528}})
    found = _one(validate(spec), "MEM004")
    assert "kv_cache.dtype" not in found.hint and re.search(r"set rollout\.max_num_seqs: \d+", found.hint), found.hint
    assert not any("kv_cache.dtype" in c for c in _proposals(validate(spec), "MEM004"))
    fp8 = validate(patched(spec, {"kv_cache": {"dtype": "fp8_e4m3"}}))  # it would remove MEM004, but KV008 warns
    assert {d.code for d in fp8.warnings} == {"KV008"}
    # with KV008 acknowledged (not in force) the same FP8 KV cache is proposed
    known = _one(validate(patched(spec, {"acknowledge": {"KV008": "compared against BF16 KV"}})), "MEM004")
    assert re.search(r"set [^;(]*kv_cache\.dtype: fp8_e4m3", known.hint), known.hint


def _proposals(result, code):
    from fp8spec.rules.registry import get_rule

    return [c for f in get_rule(code).check(result.context) for c in f.proposals]


def test_mem002_with_quantized_linears_does_not_propose_quantizing(validate):
    spec = patched(BASE_SPEC, {"rollout": {"tp": 1, "gpu_memory_utilization": 0.1}})
    found = _one(validate(spec), "MEM002")
    assert "linear.quantize" not in found.hint and "quantize the linears" not in found.hint
    assert "rollout.gpu_memory_utilization: " in found.hint  # a value that fits, checked


def test_mla_plan_prints_no_kv_fix_kv005_refuses(validate):
    """DeepSeek-V3 with a BF16 KV cache preempts; per-step FP8 KV scales are refused on MLA (KV005), so the
    plan's fix line may name an FP8 KV cache only with calibration off."""
    offload = {"training": {"offload": {"params": True, "optimizer": True}}}
    result = validate(patched(BASE_SPEC, DEEPSEEK, offload, {"kv_cache": {"dtype": "bf16"},
                                                            "rollout": {"gpu_memory_utilization": 0.7}}))
    fixes = _fix_lines(result)
    assert "MEM004" in fixes
    assert not re.search(r"kv_cache\.dtype: fp8_e4m3(?!, kv_cache\.recalibrate: none)", fixes["MEM004"])
    refused = validate(patched(BASE_SPEC, DEEPSEEK, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}))
    assert _one(refused, "KV005").severity == "error"  # the fix the plan used to print


def test_kv004_on_sglang_does_not_propose_per_step(validate):
    result = validate(patched(BASE_SPEC, SGLANG, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}}))
    found = _one(result, "KV004")
    assert "per_step" not in found.hint and "kv_cache.dtype: bf16" in found.hint
    # on vLLM per_step works and is proposed
    vllm = _one(validate(patched(BASE_SPEC, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}})), "KV004")
    assert "kv_cache.recalibrate: per_step" in vllm.hint


def test_a_refused_change_is_not_proposed_in_the_same_hint(validate):
    """SGLang with per-step scales by default: an FP8 KV cache alone is refused by KV007, so the hint that
    says so must not then propose it."""
    result = validate(patched(BASE_SPEC, SGLANG, {"kv_cache": {"dtype": "bf16", "recalibrate": "per_step"},
                                                  "rollout": {"tp": 1, "gpu_memory_utilization": 0.4}}))
    found = _one(result, "MEM004")
    for clause in found.hint.split(";"):
        if "kv_cache.dtype: fp8_e4m3" in clause and "refuse" not in clause:
            assert "kv_cache.recalibrate: none" in clause, found.hint


def test_mem005_never_proposes_a_token_budget_at_its_floor(validate):
    at_floor = {"algorithm": {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 22528},
                "training": {"backend": "megatron", "parallel": {"tp": 2}}}
    result = validate(patched(BASE_SPEC, at_floor))
    found = [d for d in result.diagnostics if d.code in ("MEM005", "MEM006")]
    assert found and "ppo_max_token_len_per_gpu" not in found[0].hint
    # above the floor a budget may be proposed, never below one sequence (PAR012)
    above = validate(patched(BASE_SPEC, at_floor, {"algorithm": {"ppo_max_token_len_per_gpu": 45056}}))
    hints = [d.hint for d in above.diagnostics if d.code in ("MEM005", "MEM006")]
    assert hints and all(int(v) >= 22528 for v in re.findall(r"ppo_max_token_len_per_gpu: (\d+)", hints[0]))


def test_mem001_on_fsdp_proposes_nodes_with_values(validate):
    result = validate(patched(BASE_SPEC, {"model": {"name": "meta-llama/Llama-3.1-70B", "path": "/m/l70"},
                                          "rollout": {"tp": 4}}))
    found = _one(result, "MEM001")
    nodes = re.findall(r"hardware\.nodes: (\d+)", found.hint)
    assert nodes, found.hint
    assert "needs at least" in found.message


def test_mem005_breakdown_names_every_term_and_sums_to_the_total(validate):
    for spec in (patched(BASE_SPEC, {"algorithm": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 4}}),
                 patched(BASE_SPEC, DEEPSEEK, {"kv_cache": {"dtype": "bf16"}})):
        found = [d for d in validate(spec).diagnostics if d.code in ("MEM005", "MEM006")][0]
        total, terms = re.search(r"peak per GPU is ([0-9.]+) GiB = (.*?), on a", found.message).groups()
        named = re.findall(r"([a-zA-Z ]+?) ([0-9.]+) GiB", terms)
        assert [n.strip() for n, _ in named] == ["state", "activations", "logits", "FSDP gather buffers",
                                                 "CUDA context"]
        # each term is rounded to 0.1 GiB: the sum is the total within that rounding
        assert abs(sum(float(v) for _, v in named) - float(total)) <= 0.05 * (len(named) + 1)


def test_a_peak_beyond_the_margin_is_an_error_within_it_a_warning(validate):
    over = _one(validate(patched(BASE_SPEC, {"algorithm": {"use_dynamic_bsz": False,
                                                           "ppo_micro_batch_size_per_gpu": 4}})), "MEM006")
    assert over.severity == "error"
    near = validate(patched(BASE_SPEC, {"algorithm": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2}}))
    assert _one(near, "MEM005").severity == "warning" and not [d for d in near.diagnostics if d.code == "MEM006"]


def test_mem005_counts_the_old_log_prob_pass_and_proposes_the_updates_budget(validate):
    """A log-prob budget far above the update's decides the peak: MEM005/MEM006 name the pass in the breakdown
    and propose the update's budget, with which the spec passes."""
    fits = validate(BASE_SPEC)
    assert not [d for d in fits.diagnostics if d.code in ("MEM005", "MEM006")]
    update = fits.context.batching.ppo_max_token_len_per_gpu
    big = patched(BASE_SPEC, {"algorithm": {"log_prob_max_token_len_per_gpu": 4 * update}})
    found = [d for d in validate(big).diagnostics if d.code in ("MEM005", "MEM006")]
    assert found, "a 4x log-prob budget must not fit"
    assert "the old-log-prob pass" in found[0].message and "activations" not in found[0].message
    assert f"algorithm.log_prob_max_token_len_per_gpu: {update}" in found[0].hint
    fixed = patched(big, {"algorithm": {"log_prob_max_token_len_per_gpu": update}})
    assert not [d for d in validate(fixed).diagnostics if d.code in ("MEM005", "MEM006")]
