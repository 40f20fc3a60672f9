"""Fuzz cases: whatever the file holds, reading it ends in a spec or in one located InputError, and checking a
spec ends in located diagnostics; never another exception. Property-based (Hypothesis), bounded."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8spec.rules.runner import validate_loaded
from fp8spec.specfile.loader import InputError, load_spec, load_spec_text
from tests.conftest import SPECS

EXAMPLE = (SPECS / "qwen3-8b.yaml").read_text(encoding="utf-8")
YAML_SYNTAX = list("-:[]{},#&*!|>'\"%@`?~=<\\ \n\t\r") + ["<<", "---", "...", "- ", ": ", "!!str", "&a", "*a",
                                                          "%YAML 1.1", "%YAML 1.10", "%YAML 2.0", "\u2028", "\x85",
                                                          "\ufeff", "\x00"]
YAMLISH = st.lists(st.one_of(st.sampled_from(YAML_SYNTAX), st.characters(), st.sampled_from(list("abcxyz0"))),
                   max_size=120).map("".join)


def _located(error: InputError, text: str) -> None:
    d = error.diagnostic
    assert d.severity == "error" and d.code.startswith("E") and d.line >= 1 and d.col >= 1
    assert d.line <= max(text.count("\n"), text.count("\r")) + 2, d.render()


def _check(text: str) -> None:
    try:
        loaded = load_spec_text(text, "fuzz.yaml")
    except InputError as err:
        _located(err, text)
        return
    assert all(d.line >= 1 and d.col >= 1 for d in loaded.diagnostics)
    if loaded.spec is not None:
        validation = validate_loaded(loaded, SPECS)
        assert all(d.line >= 1 and d.col >= 1 for d in validation.diagnostics)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_any_text(text):
    _check(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(EXAMPLE)), st.integers(0, 40), YAMLISH)
def test_example_spec_with_a_splice(at, cut, snippet):
    """A real spec with some characters replaced by YAML syntax and odd characters."""
    _check(EXAMPLE[:at] + snippet + EXAMPLE[at + cut:])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.integers(0, len(EXAMPLE)))
def test_any_bytes_in_a_file(blob, at):
    raw = EXAMPLE.encode("utf-8")[:at] + blob
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_bytes(raw)
        try:
            loaded = load_spec(path, "fuzz.yaml")
        except InputError as err:
            assert err.diagnostic.line >= 1 and err.diagnostic.col >= 1
            return
        assert all(d.line >= 1 for d in loaded.diagnostics)
