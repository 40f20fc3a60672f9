"""Every `--format json` failure prints JSON on stdout, and output that cannot be written (a full device)
is one line on stderr with exit 2, never a traceback (R12); YAML 1.1 integer spellings get a hint
that says what the readers do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, REPO, patched


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "--format", "json", "--backend", "bogus", "{spec}"],
        ["plan", "-f", "json", "/nope/missing.yaml"],
        ["plan", "-f", "json", "--backend", "bogus", "{spec}"],
        ["validate", "--format", "json", "/nope/missing.yaml"],
    ],
)
def test_json_failures_print_json(write_spec, args):
    spec = write_spec(BASE_SPEC)
    proc = run_cli_here(*[a.format(spec=spec) for a in args])
    assert proc.returncode == 2, proc.stderr
    data = json.loads(proc.stdout)
    assert "error" in data or data["files"][0]["diagnostics"][0]["severity"] == "error"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_full_device_is_a_clean_exit_2(write_spec, fmt):
    spec = write_spec(BASE_SPEC)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "fp8spec.cli", "validate", "--format", fmt, str(spec)],
                              stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "fp8spec: error: cannot write the output: No space left on device\n", proc.stderr


@pytest.mark.parametrize("text, decimal", [("0x10", "16"), ("0o17", "15"), ("1_000", "1000"), ("0b101", "5")])
def test_yaml11_integer_spellings_get_a_true_hint(validate, text, decimal):
    spec = patched(BASE_SPEC, {})
    result = validate({**spec, "rollout": {"tp": text}})
    (d,) = [d for d in result.diagnostics if d.path == "rollout.tp"]
    assert f"plain decimal number {decimal}" in d.hint and "without quotes" not in d.hint
