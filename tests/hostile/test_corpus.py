"""The hostile corpus: every file in tests/hostile/corpus/ and every special file ends in one
located error with a documented exit code (1 spec errors, 2 unreadable input; never 3, never a traceback),
the same as text and as JSON, and `compile` writes nothing for it. Regression cases keep their file here."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fp8spec import cli
from tests.conftest import REPO
from tests.unprivileged import unprivileged

CORPUS = Path(__file__).parent / "corpus"

# file -> (exit code, diagnostic code, (line, column), text the message contains)
CASES = {
    "anchor": (2, "E005", (30, 7), "anchors and aliases"),
    "bidi-in-comment": (2, "E008", (2, 14), "U+2066"),
    "bidi-override-escaped": (1, "S002", (8, 9), "U+202E"),
    "bidi-override-raw": (2, "E008", (8, 17), "U+202E"),
    "bom-at-start-ok": (0, None, None, None),
    "bom-inside": (2, "E008", (8, 17), "U+FEFF"),
    "bool-capital-yes": (1, "S002", (15, 13), "valid boolean"),
    "bool-on": (1, "S002", (15, 13), "valid boolean"),
    "bool-one": (1, "S002", (15, 13), "valid boolean"),
    "bool-yes": (1, "S002", (15, 13), "valid boolean"),
    "c1-control-escaped": (1, "S002", (8, 9), "U+009B"),
    "complex-key": (2, "E006", (28, 3), "plain scalars"),
    "deep-block-nesting": (2, "E010", (34, 65), "levels deep"),
    "duplicate-nested-key": (2, "E004", (32, 3), "first written on line 30"),
    "huge-number": (2, "E010", (30, 7), "digits"),
    "interpolation": (1, "S002", (8, 9), "'${'"),
    "leading-zero-int": (1, "S002", (30, 7), "valid integer"),
    "many-nodes": (2, "E010", None, "keys and values"),
    "merge-key": (2, "E009", (29, 3), "merge keys"),
    "nel-in-path-escaped": (1, "S002", (8, 9), "U+0085"),
    "nel-in-path-raw": (2, "E008", (8, 18), "U+0085"),
    "nested-brackets-40k": (2, "E010", (1, 36), "levels deep"),
    "nul-byte": (2, "E008", (8, 22), "U+0000"),
    "python-tag": (2, "E007", (8, 9), "tags"),
    "rayjob-injection-escaped-u2028": (1, "S002", (46, 16), "U+2028"),
    "rayjob-injection-raw-u2028": (2, "E008", (46, 21), "U+2028"),
    "sbatch-abbreviated-nodes": (1, "LCH001", (47, 32), "--node is ambiguous"),
    "sbatch-abbreviated-partition": (1, "LCH001", (48, 9), "sbatch reads it as --partition"),
    "sbatch-alias-tasks-per-node": (1, "LCH001", (47, 20), "--ntasks-per-node"),
    "tab-in-value-escaped": (1, "S002", (8, 9), "U+0009"),
    "tp-float": (1, "S002", (30, 7), "valid integer"),
    "tp-quoted": (1, "S002", (30, 7), "valid integer"),
    "tp-true": (1, "S002", (30, 7), "valid integer"),
    "unclosed-bracket": (2, "E003", (3, 12), "'[' opened here"),
    "unclosed-quote": (2, "E003", (2, 7), "quoted string opened here is never closed"),
    "version-float": (1, "S004", (4, 10), "integer 1"),
    "version-true": (1, "S004", (4, 10), "integer 1"),
    "yaml-1.1-directive": (2, "E003", (1, 1), "%YAML"),
    # found by the fuzzer (2026-12-02): ruamel's parser asserted on a version it does not know (a traceback)
    "yaml-1.10-directive": (2, "E003", (1, 1), "%YAML"),
    "yaml-1.2-directive-ok": (0, None, None, None),
}
HINTS = {"bool-yes": "yes/no/on/off", "bool-on": "yes/no/on/off", "bool-capital-yes": "yes/no/on/off",
         "tp-float": "2, not 2.0"}


def run_cli(*args: str) -> tuple[int, str, str]:
    """The real CLI entry point (fp8spec.cli.main) in this process: exit code, stdout, stderr."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["fp8spec", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def test_every_corpus_file_has_an_expectation():
    assert {p.stem for p in CORPUS.glob("*.yaml")} == set(CASES)


def _check_text(path: Path, output: str, code: str, where, fragment: str) -> None:
    # the first error: warnings and acknowledged findings of other rules may come before it
    first = next((ln for ln in output.splitlines() if " error " in ln), output.splitlines()[0])
    prefix = f"{path}:{where[0]}:{where[1]}:" if where else f"{path}:"
    assert first.startswith(prefix) and f" error {code} " in first and fragment in first, first


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_text_and_json(name):
    exit_code, code, where, fragment = CASES[name]
    path = CORPUS / f"{name}.yaml"
    rc, out, err = run_cli("validate", str(path))
    assert rc == exit_code, out + err
    assert "Traceback" not in out + err and "internal error" not in out + err
    if code is None:
        return
    _check_text(path, out, code, where, fragment)
    if name in HINTS:
        assert HINTS[name] in out
    rc, out, _ = run_cli("validate", "--format", "json", str(path))
    assert rc == exit_code
    (entry,) = json.loads(out)["files"]
    diag = next(d for d in entry["diagnostics"] if d["severity"] == "error")
    assert diag["code"] == code and fragment in diag["message"]
    if where:
        assert (diag["line"], diag["col"]) == where


@pytest.mark.parametrize("name", sorted(CASES))
def test_compile_writes_nothing_for_an_error(name, tmp_path):
    exit_code, code, where, fragment = CASES[name]
    out_dir = tmp_path / "bundles"
    rc, out, err = run_cli("compile", str(CORPUS / f"{name}.yaml"), "-o", str(out_dir))
    assert rc == exit_code, out + err
    if exit_code:
        assert not out_dir.exists()
        _check_text(CORPUS / f"{name}.yaml", err, code, where, fragment)
    else:
        assert [p.name for p in out_dir.iterdir()] == ["qwen3-8b-fp8-rollout"]


# --- special files: each run in its own process with a timeout, since the failure mode is a hang -----------


def run_subprocess(*args: str, bound_by_modes: bool = False,
                   timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fp8spec.cli", *args]
    if bound_by_modes:
        cmd = unprivileged(cmd)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout)


def _special_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, text the E001 message contains)."""
    out = {}
    for name, target in (("dev-zero", "/dev/zero"), ("dev-urandom", "/dev/urandom")):
        link = tmp_path / f"{name}.yaml"
        link.symlink_to(target)
        out[name] = (link, "character device")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    out["fifo"] = (fifo, "named pipe")
    (tmp_path / "loop-a.yaml").symlink_to(tmp_path / "loop-b.yaml")
    (tmp_path / "loop-b.yaml").symlink_to(tmp_path / "loop-a.yaml")
    out["symlink-loop"] = (tmp_path / "loop-a.yaml", "symbolic link loop")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    out["dangling-symlink"] = (tmp_path / "dangling.yaml", "symbolic link to a missing file")
    out["directory"] = (tmp_path, "is a directory")
    sparse = tmp_path / "sparse.yaml"
    with open(sparse, "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB claimed, nothing on disk
    out["huge-sparse"] = (sparse, "larger than the limit")
    return out


def test_special_files_are_refused_without_reading_them(tmp_path):
    for name, (path, fragment) in _special_files(tmp_path).items():
        for fmt in ("text", "json"):
            proc = run_subprocess("validate", "--format", fmt, str(path))
            assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr
            if fmt == "json":
                (entry,) = json.loads(proc.stdout)["files"]
                first = entry["diagnostics"][0]
                assert first["code"] == "E001" and fragment in first["message"]
            else:
                assert f"{path}:1:1: error E001 " in proc.stdout and fragment in proc.stdout, name


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        proc = run_subprocess("validate", str(path))
    finally:
        server.close()
    assert proc.returncode == 2 and " error E001 " in proc.stdout, proc.stdout + proc.stderr


def test_proc_file_with_zero_size_is_read_bounded():
    """/proc files claim size 0 and are read anyway (bounded): this one has NUL bytes, a located E008."""
    proc = run_subprocess("validate", "/proc/self/environ")
    assert proc.returncode == 2 and "error E00" in proc.stdout, proc.stdout + proc.stderr


def test_unreadable_file_is_a_located_e001_also_as_json(tmp_path):
    spec = tmp_path / "secret.yaml"
    shutil.copy(REPO / "specs" / "qwen3-8b.yaml", spec)
    spec.chmod(0)
    proc = run_subprocess("validate", str(spec), bound_by_modes=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{spec}:1:1: error E001 permission denied" in proc.stdout
    proc = run_subprocess("validate", "--format", "json", str(spec), bound_by_modes=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (entry,) = json.loads(proc.stdout)["files"]
    assert entry["diagnostics"][0]["code"] == "E001"
    out = tmp_path / "out"
    proc = run_subprocess("compile", str(spec), "-o", str(out), bound_by_modes=True)
    assert proc.returncode == 2 and "E001" in proc.stderr and not out.exists()


def test_usage_errors_are_json_when_json_is_asked_for():
    rc, out, _ = run_cli("validate", "--format", "json")
    assert rc == 2 and json.loads(out)["error"]["kind"] == "usage"


def test_config_path_to_special_files_is_refused_without_reading(tmp_path):
    """model.config_path is the other file a spec makes fp8spec read: the same bounded, regular-only read."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    base = (REPO / "specs" / "qwen3-8b.yaml").read_text()
    for target, fragment in (("/dev/zero", "character device"), ("/dev/urandom", "character device"),
                             (str(fifo), "named pipe")):
        spec = tmp_path / "spec.yaml"
        spec.write_text(base.replace("  path: /models/Qwen3-8B-Base\n",
                                     f"  path: /models/Qwen3-8B-Base\n  config_path: {target}\n"))
        proc = run_subprocess("validate", str(spec))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert " error REF001 " in proc.stdout and fragment in proc.stdout, proc.stdout
