"""Every input a user can write gives one located line and a documented exit code, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, REPO, dump_yaml, patched

BAD_FILES = {
    # name: (bytes, expected code, expected exit)
    "empty": (b"", "E006", 2),
    "only-comment": (b"# nothing\n", "E006", 2),
    "tabs": (b"version: 1\n\tname: x\n", "E003", 2),
    "duplicate": (b"version: 1\nname: a\nname: b\n", "E004", 2),
    "alias-bomb": (b"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n", "E005", 2),
    "non-utf8": (b"version: 1\nname: \xff\xfe\n", "E002", 2),
    "list": (b"- 1\n- 2\n", "E006", 2),
    "scalar": (b"hello\n", "E006", 2),
    "syntax": (b"version: [1, 2\n", "E003", 2),
    "two-docs": (b"version: 1\n---\nversion: 1\n", "E006", 2),
    "python-tag": (b"version: !!python/object:os.system 'echo hi'\n", "E007", 2),
}


def run_cli(*args, cwd=None):
    """``fp8spec ARGS`` in a real process (python -m fp8spec.cli): for tests of what only a process shows (its exit
    status and streams as seen from outside, a crash or hang kept out of pytest); the rest use run_cli_here."""
    return subprocess.run([sys.executable, "-m", "fp8spec.cli", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=60)


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file(name, tmp_path):
    content, code, exit_code = BAD_FILES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content)
    proc = run_cli_here("validate", str(path))
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"{path}:") and f" error {code} " in first, first


def test_missing_file_and_directory(tmp_path):
    for target in (tmp_path / "nope.yaml", tmp_path):
        proc = run_cli_here("validate", str(target))
        assert proc.returncode == 2
        assert "error E001" in proc.stdout and "Traceback" not in proc.stderr


SCHEMA_CASES = {
    "unknown-key": ({"rollout": {"tpp": 2}}, "S001", "did you mean 'tp'"),
    "wrong-type": ({"rollout": {"tp": "two"}}, "S002", "rollout.tp"),
    "huge-number": ({"hardware": {"nodes": 10**30}}, "S002", "hardware.nodes"),
    "infinite": ({"correction": {"clip": float("inf")}}, "S002", "finite"),
    "bad-gpu": ({"hardware": {"gpu": "h300"}}, "S002", "hardware.gpu"),
    "bad-name": ({"name": "Has Spaces"}, "S002", "name"),
    "interpolation": ({"model": {"path": "${oc.env:HOME}"}}, "S002", "'${' is not allowed"),
    "bad-version": ({"version": 2}, "S004", "version"),
    "short-block": ({"linear": {"block_size": [128]}}, "S002", "too few items"),
}


@pytest.mark.parametrize("name", sorted(SCHEMA_CASES))
def test_schema_errors_are_located(name, write_spec):
    patch, code, text = SCHEMA_CASES[name]
    path = write_spec(patched(BASE_SPEC, patch))
    proc = run_cli_here("validate", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if f" {code} " in ln]
    assert lines and text in proc.stdout, proc.stdout
    location = lines[0].split(": ")[0]
    _, line, col = location.rsplit(":", 2)
    assert int(line) > (0 if name == "bad-version" else 1) and int(col) >= 1


def test_missing_required_section(write_spec):
    data = patched(BASE_SPEC)
    del data["hardware"]
    proc = run_cli_here("validate", str(write_spec(data)))
    assert proc.returncode == 1 and "S003 missing required key 'hardware'" in proc.stdout


def test_unknown_key_location_points_at_the_key(tmp_path):
    text = dump_yaml(patched(BASE_SPEC, {"rollout": {"tpp": 2}}))
    path = tmp_path / "s.yaml"
    path.write_text(text)
    line_no = next(i for i, ln in enumerate(text.splitlines(), 1) if "tpp:" in ln)
    col = text.splitlines()[line_no - 1].index("tpp") + 1
    proc = run_cli_here("validate", str(path))
    assert f"{path}:{line_no}:{col}: error S001" in proc.stdout


@pytest.mark.parametrize("written,hint", [
    ("cuda: 12.9", 'hint: quote it: cuda: "12.9" (unquoted, YAML reads 12.9 as a number)'),
    ("cuda: 12.10", 'hint: quote it: cuda: "12.10" (unquoted, YAML reads 12.10 as a number)'),
])
def test_bare_number_for_a_version_says_quote_it(written, hint, tmp_path):
    """The reported case: an unquoted CUDA version is a number ('12.10' even reads as 12.1)."""
    text = dump_yaml(BASE_SPEC).replace("cuda: '12.9'", written)
    assert written in text
    path = tmp_path / "s.yaml"
    path.write_text(text)
    proc = run_cli_here("validate", str(path))
    assert proc.returncode == 1
    value = written.split(": ")[1]
    assert f"error S002 hardware.cuda: Input should be a valid string (got {value})\n    {hint}" in proc.stdout


def test_bare_numbers_in_a_list_are_located_per_item(tmp_path):
    text = dump_yaml(BASE_SPEC).replace("train_files: /data/train.parquet", "train_files: [12, /data/b.parquet]")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    proc = run_cli_here("validate", str(path))
    assert proc.returncode == 1
    assert "S002 data.train_files.0: Input should be a valid string (got 12)" in proc.stdout
    assert 'hint: quote it: "12"' in proc.stdout
    assert "(got [12" not in proc.stdout  # the union's list-as-text branch is noise here
