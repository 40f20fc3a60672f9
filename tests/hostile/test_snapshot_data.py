"""A snapshot file is data: nothing it says reaches pip as an option or runs code.

``fp8spec backends verify FILE`` downloads the release the file names. Every artifact field is checked first
(``fp8spec.snapshots.checks``) and pip's argument list is rebuilt from fp8spec's own settings, so a hostile value
in any field, in any of pip's option spellings, is refused with a located line and exit 2 before pip starts.
``backends check --snapshots DIR`` refuses malformed files the same way."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fp8spec.snapshots import artifacts, core, snapshot_dir
from fp8spec.snapshots.artifacts import PipRequest, pip_download_argv
from fp8spec.snapshots.checks import check_snapshot
from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO

COMMITTED = sorted(snapshot_dir().glob("*.json"))
VERL = snapshot_dir() / "verl-0.9.1.json"

# Every form in which a word can become one of pip's options or point pip somewhere else.
HOSTILE_WORDS = [
    "--no-binary=:all:",
    "--no-binary :all:",
    "--find-links",
    "--find-links=/tmp/idx",
    "--index-url=http://evil.invalid/simple",
    "--extra-index-url http://evil.invalid/simple",
    "--no-build-isolation",
    "--log /tmp/anywhere.txt",
    "--no-index",
    "-r /etc/passwd",
    "-e .",
    "-i http://evil.invalid/simple",
    "-f/tmp/idx",
    "@/tmp/args.txt",
    "verl @ file:///tmp/evil.tar.gz",
    "file:/tmp/evil.tar.gz",
    "https://evil.invalid/verl-0.9.1.tar.gz",
    "../../../../tmp/evil",
    "/etc/passwd",
    "0.9.1\n--no-binary=:all:",
    "0.9.1 --no-binary=:all:",
    "0.9.1;--log=/tmp/x",
    "",
]


def _snapshot() -> dict:
    return json.loads(VERL.read_text(encoding="utf-8"))


def _hostile_snapshots():
    """(id, snapshot) with one artifact or identity field replaced by a hostile value."""
    out = []
    record = _snapshot()["artifact"]["pip_download"]
    for i, word in enumerate(HOSTILE_WORDS):
        # appended to, or in place of, the recorded command: the forms P01 used
        out.append((f"pip_download+{i}", ("artifact", "pip_download"), record.replace(" verl==", f" {word} verl==")))
        out.append((f"pip_download={i}", ("artifact", "pip_download"), word))
        out.append((f"filename={i}", ("artifact", "filename"), word))
        out.append((f"sha256={i}", ("artifact", "sha256"), word))
        out.append((f"version={i}", ("version",), word))
        out.append((f"package={i}", ("package",), word))
    out.append(("filename-traversal", ("artifact", "filename"), "../../verl-0.9.1-py3-none-any.whl"))
    out.append(("filename-sdist", ("artifact", "filename"), "verl-0.9.1.tar.gz"))
    out.append(("sha256-newline", ("artifact", "sha256"), "a" * 64 + "\n--index-url http://evil.invalid"))
    out.append(("sha256-upper", ("artifact", "sha256"), "A" * 64))
    out.append(("version-unnormalized", ("version",), "0.9.01"))
    out.append(("package-unnormalized", ("package",), "Verl"))
    out.append(("pip_download-python-3.9", ("artifact", "pip_download"), record.replace("3.11", "3.9")))
    out.append(("pip_download-list", ("artifact", "pip_download"), record.split()))
    out.append(("size-string", ("artifact", "size"), "1"))
    return out


HOSTILE = _hostile_snapshots()


def _with(snapshot: dict, keys: tuple[str, ...], value) -> dict:
    target = snapshot
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = value
    return snapshot


@pytest.fixture
def pip_calls(monkeypatch):
    """Every subprocess fp8spec starts, recorded (and not run): none may be pip for a refused file."""
    calls = []
    real = subprocess.run

    def spy(cmd, *a, **k):
        calls.append(list(cmd))
        if "pip" in cmd:
            raise AssertionError(f"pip started: {cmd}")
        return real(cmd, *a, **k)

    monkeypatch.setattr(subprocess, "run", spy)
    return calls


@pytest.mark.parametrize("case, keys, value", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_artifact_field_is_refused_before_pip(tmp_path, pip_calls, case, keys, value):
    path = tmp_path / "verl-0.9.1.json"
    path.write_text(json.dumps(_with(_snapshot(), keys, value)), encoding="utf-8")
    proc = run_cli_here("backends", "verify", str(path), "--cache", str(tmp_path / "cache"))
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"fp8spec: error: {path}: "), proc.stderr
    assert ".".join(keys) + ":" in lines[0] or "missing" in lines[0], lines[0]
    assert pip_calls == []
    assert not (tmp_path / "cache" / "wheels").exists() or not any((tmp_path / "cache" / "wheels").iterdir())


@pytest.mark.parametrize("case, keys, value", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_field_never_becomes_a_pip_request(case, keys, value):
    """The library path too: ``artifact_for`` (used by tests and tools) refuses before building argv."""
    with pytest.raises(core.SnapshotFormatError):
        core.artifact_for(_with(_snapshot(), keys, value), "/nonexistent-cache")


@pytest.mark.parametrize("word", HOSTILE_WORDS)
def test_pip_request_refuses_hostile_name_version_python_and_hash(word):
    for kwargs in (
        {"name": word, "version": "0.9.1", "python_version": "3.11"},
        {"name": "verl", "version": word, "python_version": "3.11"},
        {"name": "verl", "version": "0.9.1", "python_version": word},
        {"name": "verl", "version": "0.9.1", "python_version": "3.11", "expected_sha256": word},
    ):
        with pytest.raises(ValueError):
            PipRequest(**kwargs)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_snapshot_checks_and_its_argv_is_the_recorded_command(path, tmp_path):
    """Each shipped snapshot checks, and the argv built from fp8spec's settings is exactly the command the file
    records (plus fixed options that keep pip quiet and hash-pinned): the same wheel is asked for."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    python_version = check_snapshot(raw, str(path))
    info = core.package_info(raw["package"])
    request = info.request(raw["version"], python_version, raw["artifact"]["sha256"])
    argv = pip_download_argv(request, tmp_path, tmp_path / "req.txt")
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in argv and "--only-binary=:all:" in argv
    assert argv[-3:] == ["--require-hashes", "-r", str(tmp_path / "req.txt")]
    recorded = raw["artifact"]["pip_download"].split()
    assert recorded[:4] == ["pip", "download", "--no-deps", "--only-binary=:all:"]
    options = recorded[4:-1]
    assert argv[argv.index("--dest") + 2 : argv.index("--require-hashes")] == options
    unpinned = pip_download_argv(info.request(raw["version"], python_version), tmp_path)
    assert unpinned[-2:] == ["--", recorded[-1]]


def test_only_fixed_options_reach_pip():
    """Every option word in any argv is one fp8spec writes itself."""
    fixed = {"--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "--no-input", "--progress-bar",
             "--dest", "--platform", "--python-version", "--ignore-requires-python", "--require-hashes", "-r", "--"}
    for pv in artifacts.PYTHON_VERSIONS:
        for sha in (None, "0" * 64):
            for ignore in (False, True):
                argv = pip_download_argv(PipRequest("verl", "0.9.1", pv, ignore, sha), Path("/c"), Path("/c/r.txt"))
                assert {w for w in argv[4:] if w.startswith("-")} <= fixed, argv


MALFORMED = {
    "package-int": '{"package": 1}',
    "not-json": "{not json",
    "empty": "",
    "list": "[]",
    "null": "null",
    "not-utf8": b'{"package": "\xff"}',
    "missing-artifact": json.dumps({k: v for k, v in _snapshot().items() if k != "artifact"}),
    "artifact-string": json.dumps({**_snapshot(), "artifact": "x"}),
    "data-list": json.dumps({**_snapshot(), "data": []}),
    "extractor-version-str": json.dumps({**_snapshot(), "extractor": {"module": "m", "version": "1"}}),
    "format-bool": json.dumps({**_snapshot(), "format": True}),
    "deep": "[" * 100000,
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_check_refuses_malformed_snapshots_one_located_line_each(tmp_path, case):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    for committed in COMMITTED:
        content = MALFORMED[case]
        (snaps / committed.name).write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = run_cli_here("backends", "check", "--snapshots", str(snaps))
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # one line per file the report reads, each naming its file
    named = sorted(ln.split("fp8spec: error: ", 1)[1].split(":", 1)[0] for ln in lines)
    assert len(lines) == len(named) and all(ln.startswith("fp8spec: error: ") for ln in lines)
    assert named == sorted(set(named)) and all(Path(n).parent == snaps for n in named), lines


def test_check_names_only_the_malformed_file(tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    for committed in COMMITTED:
        (snaps / committed.name).write_bytes(committed.read_bytes())
    (snaps / "verl-0.9.1.json").write_text(json.dumps(_with(_snapshot(), ("artifact", "sha256"), "x")))
    proc = run_cli_here("backends", "check", "--snapshots", str(snaps))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"fp8spec: error: {snaps / 'verl-0.9.1.json'}: artifact.sha256: not a sha256 (64 lower-case hex digits): 'x'"
    ]


def test_verify_never_runs_code_from_a_crafted_snapshot(tmp_path):
    """End to end, through the console entry point and a real pip: a snapshot naming a local sdist whose
    setup.py writes a marker, with pip options to build it and log anywhere, and the sdist's real sha256."""
    src = tmp_path / "pkg" / "verl-0.9.1"
    src.mkdir(parents=True)
    marker, log = tmp_path / "MARKER", tmp_path / "pip-log.txt"
    (src / "setup.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from setuptools import setup\nsetup(name='verl', version='0.9.1')\n"
    )
    idx = tmp_path / "idx"
    idx.mkdir()
    sdist = idx / "verl-0.9.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(src, arcname="verl-0.9.1")
    snap = _snapshot()
    snap["artifact"]["sha256"] = hashlib.sha256(sdist.read_bytes()).hexdigest()
    evil_options = f"--no-binary=:all: --no-index --find-links {idx} --no-build-isolation --log {log}"
    for filename in ("verl-0.9.1.tar.gz", snap["artifact"]["filename"]):
        snap["artifact"]["filename"] = filename
        snap["artifact"]["pip_download"] = (
            f"pip download --no-deps --only-binary=:all: {evil_options} verl==0.9.1"
        )
        path = tmp_path / "evil-snapshot.json"
        path.write_text(json.dumps(snap))
        proc = subprocess.run(
            [sys.executable, "-m", "fp8spec.cli", "backends", "verify", str(path), "--cache", str(tmp_path / "c")],
            capture_output=True, text=True, cwd=REPO, timeout=300,
            env={**os.environ, "PIP_NO_INDEX": "1"},  # no network either way
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith(f"fp8spec: error: {path}: artifact."), proc.stderr
        assert not marker.exists() and not log.exists()
