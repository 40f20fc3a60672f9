"""The CLI as users start it, in real processes: the installed `fp8spec` console script and `python -m fp8spec.cli`
run, exit 0/1/2 as documented, and keep diagnostics, results and usage errors on their own streams. The rest of
the CLI tests run the same entry point in-process (tests/cli/inprocess.py), so these are the ones that prove what
in-process runs cannot: the installed script, a real exit status, and what lands on which file descriptor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BASE_SPEC, EXAMPLE_SPECS, REPO, patched
from tests.specfile.test_bad_inputs import run_cli

SCRIPT = Path(sys.executable).parent / "fp8spec"  # what `pip install` put beside the interpreter


def test_the_installed_console_script_runs_the_cli(tmp_path):
    assert SCRIPT.is_file(), f"{SCRIPT}: the package's console script is not installed"
    proc = subprocess.run([str(SCRIPT), "validate", "--strict", str(EXAMPLE_SPECS[0])], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 errors, 0 warnings" in proc.stdout and proc.stderr == ""
    usage = subprocess.run([str(SCRIPT), "no-such-command"], capture_output=True, text=True, cwd=tmp_path,
                           timeout=120)
    assert usage.returncode == 2 and "Usage: fp8spec " in usage.stderr and usage.stdout == ""


def test_bad_usage_exit_2():
    assert run_cli("validate").returncode == 2
    assert run_cli("validate", "--format", "xml", str(EXAMPLE_SPECS[0])).returncode == 2
    assert run_cli("no-such-command").returncode == 2
    assert run_cli("rules", "NOPE999").returncode == 2


def test_findings_exit_1_on_stdout_and_usage_errors_on_stderr(write_spec):
    bad = write_spec(patched(BASE_SPEC, {"rollout": {"tp": 3}}))
    proc = run_cli("validate", str(bad))
    assert proc.returncode == 1 and " error PAR002 " in proc.stdout and proc.stderr == ""
    usage = run_cli("validate", "--format", "xml", str(bad))
    assert usage.returncode == 2 and usage.stdout == "" and "--format" in usage.stderr


def test_a_refused_compile_exits_1_on_stderr_and_writes_nothing(tmp_path, write_spec):
    bad = write_spec(patched(BASE_SPEC, {"rollout": {"tp": 3}}))
    out = tmp_path / "out"
    proc = run_cli("compile", str(bad), "-o", str(out))
    assert proc.returncode == 1 and " error PAR002 " in proc.stderr and "nothing written" in proc.stderr
    assert proc.stdout == "" and not out.exists()


@pytest.mark.parametrize("command, fmt", [("validate", "text"), ("explain", "json")])
def test_results_go_to_stdout_alone(command, fmt):
    proc = run_cli(command, str(REPO / "specs" / "qwen3-8b.yaml"), "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and proc.stderr == ""


def test_plan_prints_the_plan_on_stdout_and_its_diagnostics_on_stderr():
    proc = run_cli("plan", str(REPO / "specs" / "qwen3-8b.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "\nverdict: " in proc.stdout and " info MEM004 " not in proc.stdout
    assert " info MEM004 " in proc.stderr and "verdict: " not in proc.stderr
