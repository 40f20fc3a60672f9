"""The proposal prober is its own object: the runner makes one per validation, rules never read it, and each
candidate change is run once however many rules try it. The resolved spec it probes is typed and keeps its
derived views (the memory plan among them) as cached properties."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest

from fp8spec.resolve.context import ResolvedSpec
from tests.conftest import BASE_SPEC, MOE, REPO, patched


def test_each_change_is_probed_once_per_validation(validate, monkeypatch):
    import fp8spec.rules.runner as runner

    probed: Counter = Counter()
    real = runner.findings_of

    def counting(ctx):
        probed[ctx.spec.model_dump_json()] += 1
        return real(ctx)

    monkeypatch.setattr(runner, "findings_of", counting)
    # BLK001 and the MEM rules try rollout.tp values, several rules compare against the unchanged spec
    result = validate(patched(BASE_SPEC, MOE, {"rollout": {"tp": 4}}))
    assert any(d.code == "BLK001" for d in result.diagnostics)
    assert probed and max(probed.values()) == 1, probed.most_common(1)
    # the unchanged spec itself (what 'adds no error' is measured against) is one of the probes
    assert result.context.spec.model_dump_json() in probed


def test_a_rule_checked_directly_still_proposes(validate):
    """Outside the runner (a test, a tool) a rule's check makes a prober of its own."""
    from fp8spec.rules.registry import get_rule

    ctx = validate(patched(BASE_SPEC, MOE, {"rollout": {"tp": 4}})).context
    (finding, *_) = get_rule("BLK001").check(ctx)
    assert {c["rollout.tp"] for c in finding.proposals} == {1, 2}


def test_rules_do_not_read_the_prober():
    """Only the proposal helpers and the runner know the prober; a rule module that imported it could
    behave differently inside a probe than in the validation the user sees."""
    allowed = {"fp8spec/rules/probing.py", "fp8spec/rules/proposals.py", "fp8spec/rules/runner.py"}
    reads = re.compile(r"rules\.probing|\bProber\b|active_prober|\bctx\.probing|\bctx\.probes\b")
    readers = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "fp8spec").rglob("*.py")
        if reads.search(p.read_text(encoding="utf-8")) and str(p.relative_to(REPO)) not in allowed
    )
    assert readers == []
    assert reads.search("if ctx.probing:") and reads.search("from fp8spec.rules.probing import PROBE")
    assert "probing" not in {f.name for f in dataclasses.fields(ResolvedSpec)}


def test_the_resolved_spec_has_no_untyped_field():
    untyped = {f.name: f.type for f in dataclasses.fields(ResolvedSpec) if "Any" in str(f.type)}
    assert untyped == {}
    assert len(dataclasses.fields(ResolvedSpec)) >= 8  # the scan sees the fields


def test_the_memory_plan_is_made_once_per_resolved_spec(validate, monkeypatch):
    from fp8spec.plan import plan as plan_module
    from fp8spec.plan.plan import spec_memory_plan

    ctx = validate(patched(BASE_SPEC, {"rollout": {"gpu_memory_utilization": 0.9}})).context
    made = spec_memory_plan(ctx)
    # the MEM rules made it during validation; the compiler reuses it without planning again
    monkeypatch.setattr(plan_module, "build_memory_plan", lambda *a, **k: pytest.fail("planned twice"))
    assert spec_memory_plan(ctx) is made and made is not None and made.spec is ctx.spec
    monkeypatch.undo()
    unknown = validate(patched(BASE_SPEC, {"model": {"name": "my/model"}})).context
    assert unknown.model is None and spec_memory_plan(unknown) is None
