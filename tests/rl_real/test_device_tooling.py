"""The device tooling's two guards.

run_h200_real.sh's rl-wait on a machine that holds no run stops at once with exit 3 and says why, instead of
waiting out its seconds (a machine given back between two calls, the next call found a fresh one and waited
480 s on nothing); with a run folder it waits and snapshots as before. build_offline_set.py sizes
its parts so that a call carries one beside the working tree (48 MiB parts and a 21 MiB tree were refused)."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks/rl_real/run_h200_real.sh"


def wait(tmp_path, seconds: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RL_ROOT=str(tmp_path / "rl-real"), OUT=str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    return subprocess.run(["bash", str(SCRIPT), "rl-wait", seconds], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_no_run_on_this_machine_stops_at_once_with_exit_3(tmp_path):
    proc = wait(tmp_path, "600")  # without the guard this would sit out its 600 s (and the test's timeout)
    assert proc.returncode == 3, proc.stderr
    assert "no run under" in proc.stderr and "fresh machine" in proc.stderr
    assert not any((tmp_path / "out").iterdir())


def test_a_running_run_is_waited_on_and_snapshotted(tmp_path):
    run = tmp_path / "rl-real" / "real-4b-h200-fp8kv"
    run.mkdir(parents=True)
    (run / "real-4b-h200-fp8kv.log").write_text("step:1 - timing_s/update_weights:0.5\n", encoding="utf-8")
    proc = wait(tmp_path, "1")
    assert proc.returncode == 0, proc.stderr
    assert "still running" in proc.stdout
    assert (tmp_path / "out" / "rl-real-4b-h200-fp8kv.tgz").is_file()


def _builder():
    spec = importlib.util.spec_from_file_location("build_offline_set", REPO / "benchmarks/engine/build_offline_set.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parts_leave_room_for_the_tree_beside_them():
    b = _builder()
    assert b.part_mib_for(21 << 20) == 64 - 4 - 21  # a 21 MiB tree: 39 MiB parts, not 48
    assert b.part_mib_for((21 << 20) + 1) == 38  # a partial MiB counts whole
    assert b.part_mib_for(1 << 20) == b.MAX_PART_MIB  # a small tree: the cap


def test_a_tree_that_leaves_no_room_is_refused_with_a_message():
    with pytest.raises(SystemExit, match="too little room for a part"):
        _builder().part_mib_for(55 << 20)


def test_the_tree_is_measured_from_git_and_a_part_fits_beside_it():
    b = _builder()
    tree = b.tree_bytes(REPO)
    assert tree > 1 << 20  # the repository's tracked files (tests, results, snapshots)
    assert tree + (b.part_mib_for(tree) << 20) <= (b.CARRY_LIMIT_MIB - b.CARRY_HEADROOM_MIB) << 20
