"""A package of the test extra that is missing skips its tests on a contributor's machine and fails them under CI,
where the extra is installed and a skip would hide a broken environment behind a green run."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO, require, skip_missing_extra

ABSENT = "fp8spec_test_module_that_is_not_installed"
# modules no test-extra install provides: TransformerEngine needs CUDA, tomli is Python < 3.11's TOML reader
NOT_IN_THE_EXTRA = ("transformer_engine", "tomli")


def test_a_missing_module_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=ABSENT):
        require(ABSENT)


def test_a_missing_module_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=ABSENT):
        require(ABSENT)


def test_a_missing_extra_with_its_own_reason_skips_outside_ci_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="verl is not installed"):
        skip_missing_extra("verl is not installed")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="verl is not installed"):
        skip_missing_extra("verl is not installed")


def test_an_installed_module_is_returned_under_either(monkeypatch):
    for ci in ("true", None):
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        assert require("json").dumps([1]) == "[1]"


def test_no_test_skips_a_missing_extra_past_ci():
    """Every import a test may skip on goes through require(), except modules the test extra cannot provide."""
    out = subprocess.run(
        ["git", "ls-files", "tests/*.py"], cwd=REPO, capture_output=True, text=True, check=True
    )
    offenders = []
    for name in out.stdout.split():
        for number, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1):
            call = re.search(r"pytest\.importorskip\(\s*[\"']([\w.]+)", line)
            if call and not call.group(1).startswith(NOT_IN_THE_EXTRA):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "use tests.conftest.require, which fails under CI:\n" + "\n".join(offenders)
