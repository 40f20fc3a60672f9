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


# --- exit codes that must not collapse: unsupported shells, unwritable stderr, too little memory ---------------

def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fp8spec.cli", *args], text=True, cwd=REPO, timeout=120, **kw)


@pytest.mark.parametrize("option", ["--install-completion", "--show-completion"])
def test_completion_from_an_unsupported_shell_is_a_usage_error(tmp_path, option):
    import shutil

    if not shutil.which("dash"):
        pytest.skip("needs dash, a shell without completion")
    (tmp_path / "home").mkdir()
    env = dict(os.environ, HOME=str(tmp_path / "home"), SHELL="/bin/dash")
    command = " ".join([sys.executable, "-m", "fp8spec.cli", option]) + '; exit "$?"'
    proc = subprocess.run(["dash", "-c", command], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("fp8spec: error: ") and "shell 'dash' is not supported" in proc.stderr
    assert list((tmp_path / "home").iterdir()) == []


def test_completion_with_a_home_that_is_not_a_folder_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("x")
    env = dict(os.environ, HOME=str(tmp_path / "file" / "home"), SHELL="/bin/bash")
    command = " ".join([sys.executable, "-m", "fp8spec.cli", "--install-completion"]) + '; exit "$?"'
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 2 and "is not a folder" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["init", "-o"], ["schema", "-o"], ["schema", "--docs"],
                                  ["plan", str(REPO / "specs" / "qwen3-8b.yaml"), "-o"]],
                         ids=["init -o", "schema -o", "schema --docs", "plan -o"])
def test_an_output_name_over_name_max_is_a_located_exit_2(tmp_path, argv):
    proc = run_cli_here(*argv, str(tmp_path / ("c" * 300 + ".yaml")))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("fp8spec: error: ") and "File name too long" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args, code", [
    (["compile", "/nope/missing.yaml", "-o", "{tmp}/out"], 2),
    (["init", "-o", "/nonexistent-folder/x.yaml"], 2),
    (["validate", "{bad}"], 1),
    (["validate", "{good}"], 0),
    (["compile", "{good}", "-o", "{tmp}/out"], 0),
    (["rules", "NOPE999"], 2),
    (["--install-completion"], 2),  # HOME under a file
], ids=["missing spec", "init into a missing folder", "spec errors", "clean spec", "compile", "usage",
        "completion"])
def test_unwritable_stderr_keeps_the_exit_code(write_spec, tmp_path, args, code):
    good = write_spec(BASE_SPEC, "good.yaml")
    bad = write_spec(patched(BASE_SPEC, {"rollout": {"tp": 3}}), "bad.yaml")
    (tmp_path / "file").write_text("x")
    argv = [a.format(tmp=tmp_path, good=good, bad=bad) for a in args]
    env = dict(os.environ, HOME=str(tmp_path / "file" / "home"))
    with open("/dev/full", "w") as full:
        proc = _run(argv, stdout=subprocess.PIPE, stderr=full, env=env)
    assert proc.returncode == code
    if args[0] == "compile" and code == 0:
        assert (tmp_path / "out" / "base").is_dir() or any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("argv", [["validate", str(REPO / "specs" / "qwen3-8b.yaml")],
                                  ["plan", str(REPO / "specs" / "qwen3-8b.yaml"), "-o", "{tmp}/pl"],
                                  ["plan", str(REPO / "specs" / "qwen3-8b.yaml"), "-f", "json"]],
                         ids=["validate", "plan -o", "plan -f json"])
def test_too_little_memory_is_one_line_and_exit_2(tmp_path, argv):
    """An address-space limit (ulimit -v) a little above what the process holds once the CLI is imported: the
    command runs out of memory loading what it needs (a MemoryError, a library that cannot be mapped, numpy's
    OpenBLAS that would end the process with exit 1)."""
    code = f"""
import re, resource, sys
from fp8spec.cli import main
size = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 8 * 1024 * 1024, resource.RLIM_INFINITY))
sys.argv = ["fp8spec", *{[a.format(tmp=tmp_path) for a in argv]!r}]
main()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("fp8spec: error: out of memory"), proc.stderr
    assert "Traceback" not in proc.stderr
    if "json" in argv:
        assert json.loads(proc.stdout)["error"]["kind"] == "resource"
    assert not (tmp_path / "pl").exists()


def test_a_system_error_counts_as_out_of_memory_only_when_memory_is_short(monkeypatch):
    """A C extension whose allocation failed may raise SystemError ("error return without exception set") instead of
    MemoryError (seen under a low ulimit -v with the lowest supported pydantic-core): it is the user's memory limit
    only when the process cannot allocate now, otherwise an internal error."""
    from fp8spec import cli

    exc = SystemError("error return without exception set")
    assert cli._cannot_allocate() is False  # this test process is not short of memory
    assert cli._out_of_memory(exc) is False
    monkeypatch.setattr(cli, "_cannot_allocate", lambda probe=0: True)
    assert cli._out_of_memory(exc) is True
    assert cli._out_of_memory(ValueError("x")) is False
