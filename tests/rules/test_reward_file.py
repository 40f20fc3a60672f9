"""The reward file is read once, bounded, and what was checked is what ships: no FIFO can hang it, no
expression crash the validator (exit 1 with RWD004, not exit 3), a value verl cannot call is refused, and
what Python itself loads (a UTF-8 byte order mark, a latin-1 coding cookie) is accepted."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from fp8spec.compiler.build import build_settings_plan, validate_for
from fp8spec.compiler.bundle import bundle_files
from fp8spec.resolve.reward import BUNDLE_NAME, MAX_BYTES
from tests.conftest import BASE_SPEC, patched
from tests.specfile.test_bad_inputs import run_cli


def _rwd004(validation) -> list:
    return [d for d in validation.diagnostics if d.code == "RWD004"]


def _spec_with_reward(write_spec, name: str) -> Path:
    return write_spec(patched(BASE_SPEC, {"reward": {"custom_function": {"path": name}}}))


OPENED: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # observes every open() of this process; cannot be removed, filters by path below


def test_read_once_and_the_bundle_ships_what_was_checked(tmp_path, write_spec):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(*a, **k):\n    return 1.0\n")
    spec = _spec_with_reward(write_spec, "r.py")
    OPENED.clear()
    validation, choice = validate_for(spec, str(spec), None)
    valid = validation.valid()
    assert OPENED.count(str(reward)) == 1, "one open, by the reader"
    reward.write_text("def compute_score(*a, **k):\n    return 'changed after the check'\n")
    OPENED.clear()
    files = bundle_files(valid, choice, build_settings_plan(valid, choice), str(spec))
    assert files[BUNDLE_NAME] == "def compute_score(*a, **k):\n    return 1.0\n"
    assert str(reward) not in OPENED, "the compiler ships what was read, it does not read again"


def test_a_file_over_the_limit_is_refused_not_cut(tmp_path, validate):
    (tmp_path / "big.py").write_bytes(b"def compute_score(*a, **k):\n    return 0\n" + b"#" * MAX_BYTES)
    (finding,) = _rwd004(validate(patched(BASE_SPEC, {"reward": {"custom_function": {"path": "big.py"}}})))
    assert f"larger than the limit of {MAX_BYTES} bytes" in finding.message


@pytest.mark.parametrize("source", ["compute_score = " + "1+" * 200_000 + "1\n", "compute_score = " + "-" * 200_000 + "1\n"])
def test_expressions_too_deep_for_python_are_a_spec_error_not_a_crash(tmp_path, write_spec, source):
    (tmp_path / "deep.py").write_text(source)
    spec = _spec_with_reward(write_spec, "deep.py")
    proc = run_cli("validate", str(spec))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert " error RWD004 " in proc.stdout and "nested too deeply for Python to compile" in proc.stdout
    assert "internal error" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "binding, refused",
    [
        ("compute_score = 1 + 1", True),
        ("compute_score = 'score'", True),
        ("compute_score = [len]", True),
        ("compute_score = -(3 * 4) < 2", True),
        ("compute_score = None", True),
        ("compute_score = make_scorer()", False),
        ("compute_score = lambda *a, **k: 0.0", False),
        ("from math import isclose as compute_score", False),
        ("compute_score = 1\ndef compute_score(*a, **k):\n    return 0.0", False),  # the last binding counts
    ],
)
def test_a_value_verl_cannot_call_is_refused(tmp_path, validate, binding, refused):
    (tmp_path / "r.py").write_text("def make_scorer():\n    return len\n\n" + binding + "\n")
    found = _rwd004(validate(patched(BASE_SPEC, {"reward": {"custom_function": {"path": "r.py"}}})))
    assert bool(found) == refused, [d.message for d in found]
    if refused:
        assert "not a function verl can call" in found[0].message
        assert found[0].path == "reward.custom_function.name"


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbfdef compute_score(*a, **k):\n    return '\xc3\xa9t\xc3\xa9'\n",  # UTF-8 with a BOM
        b"# -*- coding: latin-1 -*-\ndef compute_score(*a, **k):\n    return '\xe9t\xe9'\n",
        b"#!/usr/bin/env python3\n# vim: set fileencoding=iso-8859-15 :\ndef compute_score(*a, **k):\n"
        b"    return '\xe9t\xe9'\n",
    ],
)
def test_files_python_loads_are_accepted_and_ship_the_same_source(tmp_path, write_spec, raw):
    (tmp_path / "r.py").write_bytes(raw)
    spec = _spec_with_reward(write_spec, "r.py")
    validation, choice = validate_for(spec, str(spec), None)
    assert not _rwd004(validation), [d.message for d in _rwd004(validation)]
    valid = validation.valid()
    shipped = bundle_files(valid, choice, build_settings_plan(valid, choice), str(spec))[BUNDLE_NAME].encode("utf-8")
    # Python reads the shipped UTF-8 bytes as the same program it reads from the user's bytes
    assert ast.dump(ast.parse(shipped)) == ast.dump(ast.parse(raw))
    namespace: dict = {}
    exec(compile(shipped, "custom_reward.py", "exec"), namespace)
    assert namespace["compute_score"]() == "été"


def test_bytes_python_refuses_are_still_refused(tmp_path, validate):
    """No cookie and latin-1 bytes: Python refuses to load it, so fp8spec does too."""
    (tmp_path / "r.py").write_bytes(b"# \xe9\ndef compute_score(**kw): return 0\n")
    (finding,) = _rwd004(validate(patched(BASE_SPEC, {"reward": {"custom_function": {"path": "r.py"}}})))
    assert "not UTF-8" in finding.message
