"""A schema typo no longer hides every rule finding: those no value of the refused field could change are
reported beside its schema error, and none that a value of it could change (no knock-on of a default)."""

from __future__ import annotations

import pytest

from tests.conftest import BASE_SPEC, patched

# tp 3: BLK001/PAR002/PAR006 whatever the typo; correction none: COR001 whatever the typo
INDEPENDENT = {"rollout": {"tp": 3}, "correction": {"method": "none"}}


def _codes(v, prefix=""):
    return {d.code for d in v.diagnostics if d.code.startswith(prefix)}


@pytest.mark.parametrize("typo", [
    {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per-step"}},  # S002, a choice
    {"rollout": {"gpu_memory_utilisation": 0.9}},  # S001, a near key
    {"hardware": {"gpu": "H100"}},  # S002, a choice the rules read everywhere
])
def test_findings_the_typo_cannot_change_are_reported(typo, validate):
    v = validate(patched(BASE_SPEC, INDEPENDENT, typo))
    assert _codes(v) & {"S001", "S002"}
    assert {"PAR002", "COR001"} <= _codes(v), [d.render() for d in v.diagnostics]
    assert all("set aside: no value of it changes this" in d.message for d in v.diagnostics
               if not d.code.startswith("S"))


@pytest.mark.parametrize("typo,field,values", [
    # SGLang with FP8 KV: KV007 fires for per_step and once, not for none; a default of per_step must not report it
    ({"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per-step"}},
     "kv_cache.recalibrate", ["per_step", "once", "none"]),
    # the share meant (0.1) starves the engine (MEM002); the default (0.6) does not
    ({"rollout": {"gpu_memory_utilisation": 0.1}}, "rollout.gpu_memory_utilization", [0.1, 0.6, 0.95]),
])
def test_no_finding_that_a_value_of_the_refused_field_changes(typo, field, values, validate):
    from tests.rules.promises import nested

    v = validate(patched(BASE_SPEC, INDEPENDENT, typo))
    reported = {(d.code, d.path) for d in v.diagnostics if not d.code.startswith("S")}
    assert reported, [d.render() for d in v.diagnostics]
    clean = patched(BASE_SPEC, INDEPENDENT, typo)
    for section in clean.values():
        if isinstance(section, dict):
            section.pop("gpu_memory_utilisation", None)
    for value in values:
        fixed = validate(patched(clean, nested({field: value})))
        assert fixed.loaded.spec is not None
        have = {(d.code, d.path) for d in fixed.diagnostics}
        assert reported <= have, (value, reported - have)


def test_a_missing_required_key_still_stops_the_rules(validate):
    data = patched(BASE_SPEC, INDEPENDENT)
    del data["model"]
    v = validate(data)
    assert _codes(v) <= {"S001", "S002", "S003"}


def test_a_hint_beside_a_typo_names_only_values_every_reading_of_it_shares(validate):
    # the memory share is refused (S001): which rollout.tp values pass depends on it (tp 1 starves the engine at
    # 0.1, not at the default 0.6), so BLK001's checked values give way to the rule's general hint
    from fp8spec.rules.registry import get_rule

    v = validate(patched(BASE_SPEC, INDEPENDENT, {"rollout": {"gpu_memory_utilisation": 0.1}}))
    blk = [d for d in v.diagnostics if d.code == "BLK001"]
    assert blk and all(d.hint == get_rule("BLK001").hint for d in blk), [d.hint for d in blk]
