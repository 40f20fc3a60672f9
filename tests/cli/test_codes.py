"""Every code fp8spec can print is explained by `fp8spec rules CODE`: rule codes, the schema's S0xx and the
reader's E0xx (fp8spec/data/input_codes.yaml, checked here against the codes the source can emit)."""

from __future__ import annotations

import re

import pytest

from fp8spec.report.verdicts import all_verdicts
from fp8spec.rules.registry import all_rules
from fp8spec.specfile.codes import input_codes
from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO
from tests.hostile.test_corpus import CASES as CORPUS_CASES

_LITERAL = re.compile(r"[\"']([ES]\d{3})[\"']")


def _emitted_input_codes() -> set[str]:
    """S/E code literals in fp8spec's sources: every diagnostic that is not a rule's is built from one."""
    found = set()
    for path in (REPO / "fp8spec").rglob("*.py"):
        found.update(_LITERAL.findall(path.read_text(encoding="utf-8")))
    return found


def test_catalogue_matches_the_codes_the_source_emits():
    emitted = _emitted_input_codes()
    assert {"E001", "E010", "S001", "S005"} <= emitted  # the scan itself works
    assert emitted == set(input_codes()), "fp8spec/data/input_codes.yaml must explain exactly these codes"


def test_every_code_literal_in_the_source_is_explained():
    """Any code-shaped string in fp8spec (a rule's, the reader's, or one added later elsewhere) is one that
    `fp8spec rules` explains."""
    literal = re.compile(r"[\"']([A-Z]{1,4}\d{3})[\"']")
    found = set()
    for path in (REPO / "fp8spec").rglob("*.py"):
        found.update(literal.findall(path.read_text(encoding="utf-8")))
    known = set(input_codes()) | {r.code for r in all_rules()} | {v.code for v in all_verdicts()}
    assert len(found) > 60 and found <= known, sorted(found - known)


def test_printed_codes_in_the_hostile_corpus_are_catalogued():
    printed = {code for _, code, _, _ in CORPUS_CASES.values() if code}
    known = set(input_codes()) | {r.code for r in all_rules()}
    assert printed and printed <= known


@pytest.mark.parametrize("code", ["E001", "E008", "S002", "S005", "blk001", "MEM003", "HW006"])
def test_rules_explains_code(code):
    proc = run_cli_here("rules", code)
    assert proc.returncode == 0, proc.stderr
    head, *_ = proc.stdout.splitlines()
    assert head.startswith(code.upper() + " ")
    assert "\nWhy: " in proc.stdout and "\nFix: " in proc.stdout
    if code.startswith("E"):
        assert "exit 2" in head
    if code.startswith("S"):
        assert "exit 1" in head


def test_every_code_is_explained_in_process():
    from typer.testing import CliRunner

    from fp8spec.cli import app

    runner = CliRunner()
    for code in [r.code for r in all_rules()] + sorted(input_codes()):
        result = runner.invoke(app, ["rules", code])
        assert result.exit_code == 0 and "\nWhy: " in result.output and "\nFix: " in result.output, code


def test_rules_lists_input_codes_and_refuses_unknown():
    proc = run_cli_here("rules")
    assert proc.returncode == 0
    for code in ("BLK001", "HW006", "E001", "E010", "S001", "S005"):
        assert re.search(rf"^{code} ", proc.stdout, re.M), code
    proc = run_cli_here("rules", "X999")
    assert proc.returncode == 2 and "no rule or code 'X999'" in proc.stderr


def test_rules_code_prints_its_examples():
    """A rule's explanation ends with its examples: the fragment that fires it (and what the message says), the
    ones that pass, the files they need, and the base spec they are merged over."""
    proc = run_cli_here("rules", "BLK001")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    fires = text.index('Fires (the message says "768 / tp 4 = 192"):')
    passes = text.index("Passes:")
    assert text.index("\nFix: ") < fires < passes
    assert "  rollout:\n    tp: 4\n" in text[fires:passes] and "  rollout:\n    tp: 2\n" in text[passes:]
    assert "fp8spec/data/rule_examples_base.yaml" in text
    reward = run_cli_here("rules", "RWD004").stdout
    assert "with reward.py beside the spec:\n  def compute_score(" in reward


def test_rules_json_is_the_same_facts():
    import json

    from fp8spec.rules.registry import get_rule

    proc = run_cli_here("rules", "KV006", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    examples = get_rule("KV006").examples
    assert data["code"] == "KV006" and data["rationale"] == get_rule("KV006").rationale
    assert data["examples"]["bad"] == examples.bad and data["examples"]["good"] == list(examples.good_fragments)
    assert len(data["examples"]["good"]) == 2 and data["examples"]["message"] == examples.message
    listing = json.loads(run_cli_here("rules", "-f", "json").stdout)
    assert [r["code"] for r in listing["rules"]] == [r.code for r in all_rules()]
    assert {c["code"] for c in listing["input_codes"]} == set(input_codes())
    assert json.loads(run_cli_here("rules", "s005", "-f", "json").stdout)["exit_code"] == 1
    unknown = run_cli_here("rules", "X999", "-f", "json")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["kind"] == "usage"
    assert run_cli_here("rules", "-f", "xml").returncode == 2
