"""A GPU whose memory fp8spec does not know: the spec may state it, else a finding says the memory rules did not
run, and no report lists a rule that did not run as passed."""

from __future__ import annotations

import re

import pytest
from ruamel.yaml import YAML

from fp8spec.plan.facts import gpu_memory
from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, REPO, patched
from tests.launchers.conftest import compile_bundle

MEMORY_RULES = [f"MEM00{i}" for i in range(1, 8)]
UNRECORDED = sorted(
    name
    for name, entry in YAML(typ="safe").load((REPO / "fp8spec" / "data" / "gpu_memory.yaml").read_text()).items()
    if entry["mib"] is None
)
# the reported case: a utilization no GPU leaves room for beside a colocated trainer
GREEDY = {"rollout": {"gpu_memory_utilization": 0.99}}


def _codes(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for d in result.diagnostics:
        out.setdefault(d.code, []).append(d)
    return out


def _listed(readme: str) -> dict[str, str]:
    """code -> the status the README's Checks section gives it."""
    checks = readme.split("## Checks", 1)[1].split("## Metrics", 1)[0]
    return dict(re.findall(r"^- ([A-Z]+\d{3}) [a-z0-9-]+: (\w+)", checks, flags=re.M))


def test_some_gpu_has_no_recorded_memory():
    assert UNRECORDED, "every GPU is recorded: pick another case for these tests"
    assert all(gpu_memory(name).total_bytes is None for name in UNRECORDED)


@pytest.mark.parametrize("gpu", UNRECORDED)
def test_unknown_memory_is_a_finding_not_a_silent_pass(gpu, validate):
    found = _codes(validate(patched(BASE_SPEC, GREEDY, {"hardware": {"gpu": gpu}})))
    (d,) = found["MEM008"]
    assert (d.severity, d.path) == ("warning", "hardware.gpu")
    assert "MEM001" in d.message and "hardware.gpu_memory_gib" in d.message + d.hint
    assert not set(found) & set(MEMORY_RULES)


def test_stated_memory_makes_the_memory_rules_run(validate):
    found = _codes(validate(patched(BASE_SPEC, GREEDY, {"hardware": {"gpu": "h800", "gpu_memory_gib": 79}})))
    assert "MEM008" not in found
    assert "MEM003" in found and found["MEM003"][0].severity == "error"


def test_a_stated_memory_is_what_the_plan_uses(validate, write_spec):
    spec = write_spec(patched(BASE_SPEC, {"hardware": {"gpu": "h800", "gpu_memory_gib": 79}}))
    proc = run_cli_here("plan", str(spec))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert f"{79 << 30:,} bytes per GPU as CUDA reports them (hardware.gpu_memory_gib)" in proc.stdout
    unknown = write_spec(patched(BASE_SPEC, {"hardware": {"gpu": "h800"}}), "unknown.yaml")
    proc = run_cli_here("plan", str(unknown))
    assert proc.returncode == 2 and "hardware.gpu_memory_gib" in proc.stdout + proc.stderr


def test_the_bundle_lists_the_memory_rules_as_skipped_with_the_reason(write_spec, tmp_path):
    bundle = compile_bundle(write_spec(patched(BASE_SPEC, {"hardware": {"gpu": "h800"}})), tmp_path)
    readme = (bundle / "README.md").read_text()
    listed = _listed(readme)
    assert {code: listed.get(code) for code in MEMORY_RULES} == dict.fromkeys(MEMORY_RULES, "skipped")
    assert listed["MEM008"] == "warning"
    assert "skipped, the memory of hardware.gpu 'h800' is not recorded" in readme
    assert "## Memory plan\n\nNone: the memory of hardware.gpu 'h800' is not recorded" in readme
    assert not (bundle / "plan.svg").exists()


def test_a_rule_of_another_engine_is_not_listed(write_spec, tmp_path):
    from fp8spec.rules.registry import all_rules

    readme = (compile_bundle(write_spec(BASE_SPEC), tmp_path) / "README.md").read_text()
    listed = _listed(readme)
    sglang_only = {r.code for r in all_rules() if r.engine == "sglang"}
    assert sglang_only and not sglang_only & set(listed)
    assert listed["MEM001"] == "passed"  # a rule that ran is still listed


def test_the_serve_bundle_lists_only_the_rules_that_judge_the_engine(write_spec, tmp_path):
    from fp8spec.rules.registry import get_rule

    bundle = compile_bundle(write_spec(BASE_SPEC), tmp_path, backend="vllm")
    listed = _listed((bundle / "README.md").read_text())
    assert listed and all(get_rule(code).scope == "engine" for code in listed)
    for trainer_rule in ("RUN001", "COR001", "MEM003", "TRN001", "CLU003"):
        assert trainer_rule not in listed
    assert listed["KV001"] == "passed" and listed["EXC001"] == "passed"


def test_an_acknowledged_unknown_memory_still_reports_the_rules_as_skipped(write_spec, tmp_path):
    spec = patched(BASE_SPEC, {"hardware": {"gpu": "h800"}, "acknowledge": {"MEM008": "sized by hand"}})
    listed = _listed((compile_bundle(write_spec(spec), tmp_path) / "README.md").read_text())
    assert listed["MEM008"] == "acknowledged"
    assert {listed[code] for code in MEMORY_RULES} == {"skipped"}
