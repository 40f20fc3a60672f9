"""Concurrent and killed compiles, with real processes: without --force exactly one of several compiles of a
bundle wins and the others exit 2 with a message; what a killed run leaves is cleaned by the next run for that
bundle (and a live run's staging folder is not); --force over a plain file refuses and leaves it as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fp8spec.compiler import writer
from tests.conftest import REPO, SPECS

SPEC = SPECS / "qwen3-8b.yaml"
BUNDLE = "qwen3-8b-fp8-rollout"


def start_compile(out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "fp8spec.cli", "compile", str(SPEC), "-o", str(out), *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append((p.returncode, out, err))
    return results


def entries(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


def assert_one_winner(results, out: Path) -> None:
    winners = [r for r in results if r[0] == 0]
    losers = [r for r in results if r[0] != 0]
    assert len(winners) == 1, results
    for code, _, err in losers:
        assert code == 2 and "already exists" in err and "Traceback" not in err, losers
    assert entries(out) == [BUNDLE], "no staging, lock or set-aside folder left behind"
    manifest = (out / BUNDLE / "manifest.json").read_text()
    assert '"backend": "fsdp+vllm"' in manifest


def _opened_by(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_racing_compiles_have_one_winner(tmp_path):
    """All compiles pass the early "does it exist?" check while this test holds the bundle's lock; once it
    is released they race to put their bundle in place: one wins, the others are refused at the rename."""
    out = tmp_path / "out"
    out.mkdir()
    lock = out / f".{BUNDLE}.lock"
    with writer._bundle_lock(out, BUNDLE):
        procs = [start_compile(out) for _ in range(4)]
        deadline = time.monotonic() + 240
        while not all(_opened_by(p.pid, lock) for p in procs):  # each one is waiting for the lock
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), finish(procs)
            time.sleep(0.05)
    results = finish(procs)
    assert_one_winner(results, out)
    assert sum("while this one ran" in err for _, _, err in results) == 3, results


def test_free_running_compiles_have_one_winner(tmp_path):
    out = tmp_path / "out"
    assert_one_winner(finish([start_compile(out) for _ in range(4)]), out)


def test_concurrent_force_compiles_leave_one_complete_bundle(tmp_path):
    out = tmp_path / "out"
    results = finish([start_compile(out, "--force") for _ in range(3)])
    assert all(code == 0 for code, _, _ in results), results
    assert entries(out) == [BUNDLE]
    # complete: exactly the files its own manifest lists, plus the manifest
    listed = set(json.loads((out / BUNDLE / "manifest.json").read_text())["files"]) | {"manifest.json"}
    present = {p.relative_to(out / BUNDLE).as_posix() for p in (out / BUNDLE).rglob("*") if p.is_file()}
    assert present == listed and {"launch.sh", "runtime_env.yaml", "rayjob.yaml"} <= present


STAGE_AND_WAIT = """
import sys, time
from pathlib import Path
from fp8spec.compiler import writer
out, name = Path(sys.argv[1]), sys.argv[2]
with writer._bundle_lock(out, name):
    staging, fd = writer._staging_dir(out, name)
(staging / "launch.sh").write_text("#!/bin/sh\\n")
print(staging, flush=True)
time.sleep(300)
"""


def stage_and_wait(out: Path) -> tuple[subprocess.Popen, Path]:
    """A run of the real writer that has staged part of a bundle, then waits (to be killed, or not)."""
    proc = subprocess.Popen([sys.executable, "-c", STAGE_AND_WAIT, str(out), BUNDLE], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    return proc, Path(proc.stdout.readline().strip())


def test_leftovers_of_killed_runs_are_cleaned_and_live_ones_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    killed, killed_staging = stage_and_wait(out)
    live, live_staging = stage_and_wait(out)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    other = out / ".other-bundle.tmp-0123456789abcdef"  # another bundle's leftover is not this run's business
    other.mkdir()
    try:
        code, _, err = finish([start_compile(out)])[0]
        assert code == 0, err
        assert not killed_staging.exists()
        assert live_staging.exists(), "a live run's staging folder is left alone"
        assert other.exists()
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait(30)
    code, _, err = finish([start_compile(out, "--force")])[0]
    assert code == 0, err
    assert entries(out) == [".other-bundle.tmp-0123456789abcdef", BUNDLE]


def test_force_over_a_plain_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / BUNDLE).write_text("not a bundle")
    code, _, err = finish([start_compile(out)])[0]
    assert code == 2 and "already exists" in err
    code, _, err = finish([start_compile(out, "--force")])[0]
    assert code == 2 and "not replaced: it is a file, not a bundle folder" in err, err
    assert entries(out) == [BUNDLE] and (out / BUNDLE).read_text() == "not a bundle"
