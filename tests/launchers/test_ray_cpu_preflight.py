"""A Ray cluster with too few logical CPUs for verl's main_ppo is refused in seconds, on a REAL loopback Ray head.

verl 0.9.1 waits forever, without an error, for CPUs Ray cannot give (test_verl_cpu_need.py shows it); the bundle
asks first: the preflight job (submit.sh), and launch.sh run by hand (preflight_cpus.py), each stop with
one line and exit code 3. The head of the other launch tests offers exactly the number, and passes.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from fp8spec.profiles import load_profile
from tests.launchers.conftest import start_ray_head

# one xdist worker: its three small-head tests share one module head (spread over two workers, each started one)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray-small-head")]

NEED = load_profile("verl", "0.9.1").value("requirement.ray_cpus_before_gpus")
SHORT = "preflight: error: the Ray cluster offers 2 logical CPUs; verl 0.9.1's main_ppo needs 9 "


@pytest.fixture(scope="module")
def small_head():
    with start_ray_head(2) as head:
        yield head


def _timed(cmd: list[str], env: dict, cwd) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - started


def test_launch_sh_by_hand_refuses_a_two_cpu_head_in_seconds(small_head, bundle_8b, tmp_path):
    env = dict(small_head.env, RAY_ADDRESS=small_head.gcs)
    proc, took = _timed(["bash", str(bundle_8b / "launch.sh")], env, tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(SHORT), proc.stderr
    assert "--num-cpus=9 or more" in lines[0]
    assert "main_ppo" not in proc.stdout  # verl never started
    assert took < 30, took  # seconds (3 s here), not the silent wait


def test_the_preflight_job_refuses_a_two_cpu_head(small_head, bundle_8b, tmp_path):
    proc, took = _timed(["bash", str(bundle_8b / "submit.sh"), "--address", small_head.dashboard,
                         "--skip-gpu-checks", "--id-suffix", "cpus"], small_head.env, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert SHORT in proc.stdout + proc.stderr
    assert "the training job was NOT submitted" in proc.stderr
    assert "FP8SPEC_PREFLIGHT_RESULT" not in proc.stdout  # stopped before any node task
    assert took < 120, took


def test_the_cpu_check_passes_on_a_head_with_enough(ray_head, bundle_8b, tmp_path):
    env = dict(ray_head.env, RAY_ADDRESS=ray_head.gcs)
    proc, _ = _timed(["python3", str(bundle_8b / "preflight_cpus.py")], env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"preflight: the Ray cluster offers {NEED} logical CPUs: enough for verl's main_ppo"


def test_skip_variable_lets_launch_sh_past_the_check(small_head, bundle_8b, tmp_path):
    """FP8SPEC_SKIP_RAY_CPU_CHECK=1 (a cluster that grows on demand): launch.sh goes on to verl."""
    env = dict(small_head.env, RAY_ADDRESS=small_head.gcs, FP8SPEC_SKIP_RAY_CPU_CHECK="1")
    proc = subprocess.Popen(["bash", str(bundle_8b / "launch.sh"), "--help"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    assert proc.returncode == 0 and "Powered by Hydra" in out, out  # verl's main_ppo printed its Hydra help
    assert "logical CPUs" not in out, out
