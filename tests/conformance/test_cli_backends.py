"""``fp8spec backends``: list, refresh, verify, check; exit codes 0 ok / 1 drift / 2 bad input or a failed
download, errors on one line, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from fp8spec.snapshots import snapshot_dir
from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO


def run(*args, env=None, timeout=300):
    """``fp8spec backends ARGS`` through the CLI's entry point: in this process (tests/cli/inprocess.py), or in
    a real one where the test sets the environment it runs in."""
    if env is None:
        proc = run_cli_here("backends", *args)
    else:
        proc = subprocess.run([sys.executable, "-m", "fp8spec.cli", "backends", *args], capture_output=True,
                              text=True, cwd=REPO, timeout=timeout, env={**os.environ, **env})
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def one_line_error(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fp8spec: error: "), proc.stderr
    return lines[0]


def test_list():
    proc = run("list")
    assert proc.returncode == 0, proc.stderr
    assert "vllm                0.24.0, 0.33.0        0.24.0    0.24.0, 0.33.0" in proc.stdout
    assert "megatron-core       0.18.2, 0.19.2        0.18.2    0.16.1, 0.18.2, 0.19.2" in proc.stdout
    assert "default stack (backends/stack.yaml): verl 0.9.1, vllm 0.24.0, sglang 0.5.12" in proc.stdout
    data = json.loads(run("list", "--format", "json").stdout)
    assert {r["kind"]: r["default"] for r in data["backends"]}["sglang"] == "0.5.12"


def test_check_all_ok():
    proc = run("check")
    assert proc.returncode == 0, proc.stdout
    assert "vllm 0.33.0: ok (" in proc.stdout and "0 mismatches" in proc.stdout
    assert "evidence only:" in proc.stdout
    quiet = run("check", "--failures-only", "vllm==0.24.0", "sglang")
    assert quiet.returncode == 0
    assert quiet.stdout.splitlines()[0].startswith("vllm 0.24.0: ok")
    assert len(quiet.stdout.splitlines()) == 4  # three profiles + the summary
    data = json.loads(run("check", "--format", "json", "transformer-engine").stdout)
    assert data["ok"] and data["profiles"][0]["evidence_only"]


def test_check_reports_drift_with_exit_1(tmp_path):
    root = tmp_path / "snaps"
    shutil.copytree(snapshot_dir(), root)
    path = root / "vllm-0.24.0.json"
    raw = json.loads(path.read_text())
    del raw["data"]["flags"]["--calculate-kv-scales"]
    path.write_text(json.dumps(raw))
    proc = run("check", "--snapshots", str(root), "vllm")
    assert proc.returncode == 1, proc.stdout
    assert "vllm 0.24.0: DRIFT" in proc.stdout
    assert "FAIL  flag.calculate_kv_scales: flag --calculate-kv-scales" in proc.stdout
    assert "vllm 0.33.0: ok" in proc.stdout


@pytest.mark.parametrize("args,message", [
    (("check", "torch"), "unknown backend kind 'torch'"),
    (("check", "vllm==0.1.0"), "no vllm profile for version '0.1.0'; supported versions: 0.24.0, 0.33.0"),
    (("check", "--format", "xml"), "--format must be text or json"),
    (("check", "--snapshots", "/nonexistent"), "is not a folder"),
    (("refresh",), "name at least one release"),
    (("refresh", "vllm"), "expected an exact pin such as 'vllm==0.33.0'"),
    (("refresh", "vllm>=0.33"), "expected an exact pin"),
    (("refresh", "torch==2.11.0"), "no snapshot extractor for package 'torch'"),
    (("verify", "nope.json"), "no snapshot nope.json"),
    (("verify", "vllm==0.0.1"), "no snapshot"),
    (("list", "--format", "xml"), "--format must be text or json"),
])
def test_bad_input_exit_2_one_line(args, message):
    proc = run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in one_line_error(proc)


def test_usage_errors_exit_2():
    assert run().returncode == 2  # help
    assert run("no-such-command").returncode == 2
    assert run("check", "--no-such-option").returncode == 2


def test_unreadable_snapshot_is_bad_input(tmp_path):
    bad = tmp_path / "vllm-0.33.0.json"
    bad.write_text("{not json")
    proc = run("verify", str(bad))
    assert proc.returncode == 2
    assert one_line_error(proc).startswith(f"fp8spec: error: {bad}:1:2: not JSON: ")


def test_network_failure_is_one_line_exit_2(tmp_path):
    """pip cannot reach the index (a closed local port): one line naming the reason, exit 2, nothing
    written."""
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_FIND_LINKS": "",
           "PIP_RETRIES": "1", "PIP_TIMEOUT": "2"}
    proc = run("refresh", "sglang==0.5.12", "--cache", str(tmp_path / "cache"),
               "--out", str(tmp_path / "out"), env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line_error(proc)
    assert line.startswith("fp8spec: error: cannot download sglang==0.5.12: ")
    assert not (tmp_path / "out" / "sglang-0.5.12.json").exists()


@pytest.mark.slow
def test_refresh_and_verify_real_wheel(tmp_path):
    """verl's wheel (small) through pip into a private cache: refresh writes the committed bytes, verify
    confirms them, and a tampered copy is reported as drift (exit 1)."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    proc = run("refresh", "verl==0.9.1", "--cache", str(cache), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verl==0.9.1: wrote ")
    assert (out / "verl-0.9.1.json").read_text() == (snapshot_dir() / "verl-0.9.1.json").read_text()
    again = run("refresh", "verl==0.9.1", "--cache", str(cache), "--out", str(out))
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert run("verify", str(out / "verl-0.9.1.json"), "--cache", str(cache)).returncode == 0
    raw = json.loads((out / "verl-0.9.1.json").read_text())
    raw["data"]["configs"]["ppo_trainer"]["keys"]["actor_rollout_ref.actor.tis_imp_ratio_cap"] = 2.0
    (out / "verl-0.9.1.json").write_text(json.dumps(raw))
    proc = run("verify", str(out / "verl-0.9.1.json"), "--cache", str(cache))
    assert proc.returncode == 1
    assert "DRIFT verl==0.9.1" in proc.stdout and "tis_imp_ratio_cap" in proc.stdout
