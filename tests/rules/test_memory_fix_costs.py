"""A memory fix says what it costs the run, the cheapest comes first, and a proposed memory value keeps the stated
headroom: MEM004's concurrency cap trades throughput for memory and must say so; a larger engine share costs none."""

from __future__ import annotations

import re

import pytest

from fp8spec.plan.plan import spec_memory_plan
from tests.conftest import BASE_SPEC, patched
from tests.rules.promises import nested

GIB = 1 << 30


def proposal_headroom() -> int:  # the margin docs/spec.md states (fp8spec/data/memory_estimates.yaml proposals)
    return 2 * GIB


QWEN14_2X8 = {"model": {"name": "Qwen/Qwen3-14B", "path": "/models/q14"}, "hardware": {"nodes": 2},
              "rollout": {"tp": 2, "max_model_len": 22528}}


def _finding(validation, code):
    found = [d for d in validation.diagnostics if d.code == code]
    assert found, [d.render() for d in validation.diagnostics]
    return found[0]


# 48 sequences per replica: the largest share beside the trainer (its kept memory as measured) holds half of them
MISTYPED_SHARE = {"rollout": {"gpu_memory_utilization": 0.15, "max_num_seqs": 48}}


def test_mistyped_share_first_proposes_raising_it_not_capping_concurrency(validate):
    spec = patched(BASE_SPEC, QWEN14_2X8, MISTYPED_SHARE)
    hint = _finding(validate(spec), "MEM004").hint
    first = re.search(r"set (\S+):", hint).group(1)
    assert first == "rollout.gpu_memory_utilization", hint
    assert "rollout.gpu_memory_utilization: 0." in hint and "no throughput cost" in hint


@pytest.mark.parametrize("patch", [
    {"rollout": {"max_response_length": 20480}},
    {"rollout": {"gpu_memory_utilization": 0.15}},
    {"kv_cache": {"dtype": "bf16"}, "rollout": {"gpu_memory_utilization": 0.3}},
])
def test_a_concurrency_cap_names_its_cost(patch, validate):
    spec = patched(BASE_SPEC, QWEN14_2X8, patch)
    d = _finding(validate(spec), "MEM004")
    cap = re.search(r"rollout\.max_num_seqs: (\d+) \(([^)]*)\)", d.hint)
    assert cap, d.hint
    assert re.search(r"concurrency \d+ -> \d+ per replica \(-\d+ %\), est\. rollout throughput -\d+ %", d.hint), d.hint


def test_proposals_are_ranked_cheapest_first(validate):
    spec = patched(BASE_SPEC, QWEN14_2X8, MISTYPED_SHARE)
    v = validate(spec)
    rule_findings = [f for rule, f, _ in v.findings if rule.code == "MEM004"]
    assert rule_findings and rule_findings[0].proposals
    costs = rule_findings[0].costs
    assert len(costs) == len(rule_findings[0].proposals)
    capping = [i for i, p in enumerate(rule_findings[0].proposals) if "rollout.max_num_seqs" in p]
    free = [i for i, c in enumerate(costs) if c.startswith("no throughput cost")]
    assert free and capping and max(free) < min(capping), (rule_findings[0].proposals, costs)


@pytest.mark.parametrize("code,patch", [
    ("MEM003", {"rollout": {"gpu_memory_utilization": 0.9}}),
    ("MEM003", {"model": {"name": "Qwen/Qwen3-14B", "path": "/m"}, "rollout": {"gpu_memory_utilization": 0.85}}),
    ("MEM007", {"rollout": {"sync_bucket_mb": 65536}}),
])
def test_a_proposed_memory_fix_keeps_the_stated_headroom(code, patch, validate):
    spec = patched(BASE_SPEC, patch)
    d = _finding(validate(spec), code)
    assert f"leaves {proposal_headroom() / GIB:.1f} GiB free" in d.hint, d.hint
    value = re.search(r"(rollout\.(?:gpu_memory_utilization|sync_bucket_mb)): ([0-9.]+)", d.hint)
    field, number = value.group(1), float(value.group(2))
    after = validate(patched(spec, nested({field: int(number) if field.endswith("_mb") else number})))
    plan = spec_memory_plan(after.context)
    if code == "MEM003":
        left = plan.headroom(plan.trainer)
    else:
        from fp8spec.plan.feasibility import at_sync

        left = plan.total_bytes - at_sync(plan, plan.trainer)[2]
    assert left >= proposal_headroom(), (left / GIB, d.hint)


def test_a_value_is_named_once_per_field(validate):
    """MEM004's FP8 KV cache with and without recalibrate: none are one change where recalibrate is none already:
    'kv_cache.dtype: fp8_e4m3 or fp8_e4m3' named it twice."""
    import re as _re

    spec = patched(BASE_SPEC, {"model": {"name": "meta-llama/Llama-3.1-8B", "path": "/m"},
                               "kv_cache": {"dtype": "bf16", "recalibrate": "none"},
                               "rollout": {"engine": "sglang", "tp": 1, "gpu_memory_utilization": 0.7}})
    v = validate(spec)
    hints = [d.hint or "" for d in v.diagnostics]
    assert any("kv_cache.dtype: fp8_e4m3" in h for h in hints), hints
    for h in hints:
        for m in _re.finditer(r"([a-z_.]+): ((?:[\w.]+)(?: or [\w.]+)+)", h):
            values = m.group(2).split(" or ")
            assert len(values) == len(set(values)), h


def test_memory_hints_say_the_layout_first_on_a_refused_layout(validate):
    spec = patched(BASE_SPEC, {"model": {"name": "Qwen/Qwen3-30B-A3B-Base", "path": "/m"}, "rollout": {"tp": 2},
                               "training": {"backend": "megatron", "precision": "fp8",
                                            "parallel": {"tp": 2, "ep": 3}}})
    v = validate(spec)
    mem = [d for d in v.diagnostics if d.code.startswith("MEM")]
    assert mem and {"PAR001", "PAR009"} <= {d.code for d in v.diagnostics}
    for d in mem:
        assert d.hint.startswith("fix the layout first (PAR001, PAR009)"), d.hint
