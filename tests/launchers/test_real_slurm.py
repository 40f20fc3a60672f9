"""slurm.sbatch through a real single-node Slurm (tests/launchers/slurm.py says how it is started and stopped):
real ``sbatch`` allocates the node, the script starts a real Ray head through ``srun`` (loopback only), waits
for the GPUs Slurm allocated, submits the bundle's preflight job with the CPU-only switch, and tears down: the
job completes and no process it started is left.

The Slurm node declares 8 GPUs backed by plain files (Slurm's accounting; there is no device), so the script
runs unchanged, ``--gpus-per-node=8`` included. The preflight runs with --skip-gpu-checks --preflight-only:
the training job needs GPUs (its CPU path up to the GPU request runs in test_real_launch.py).
Without root or apt-get the test skips, saying why; in CI (CI set) it must run, so there it fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.launchers import slurm as slurm_mod
from tests.launchers.conftest import MARK_VAR, _free_ports, _marked_tree, _stop_marked
from tests.launchers.test_real_launch import launchable_bundle, plant_pins

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]  # one real Slurm

RESULT_TAG = "FP8SPEC_PREFLIGHT_RESULT "


@pytest.fixture(scope="module")
def slurm():
    try:
        cluster = slurm_mod.start()
    except slurm_mod.Unavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real Slurm tests: {err}")
        pytest.skip(f"no real Slurm here: {err}")
    try:
        yield cluster
    finally:
        slurm_mod.stop(cluster)


def ray_env(tmp_path, mark: str) -> dict:
    """Ports for the script's Ray head, all on the loopback and free, and a short temp dir (socket paths)."""
    ray_port, dash, client, agent_http, agent_grpc, metrics, node_mgr, obj_mgr, env_agent, as_metrics, d_metrics = \
        _free_ports(11)
    temp = tmp_path / "ray"
    return {
        MARK_VAR: mark, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
        # the example spec logs to wandb, whose key the preflight checks: a well-formed dummy, never used
        "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
        "AUTOSCALER_METRIC_PORT": str(as_metrics), "DASHBOARD_METRIC_PORT": str(d_metrics),
        "FP8SPEC_RAY_PORT": str(ray_port), "FP8SPEC_DASHBOARD_PORT": str(dash),
        "FP8SPEC_RAY_START_ARGS": " ".join([
            f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
            f"--node-manager-port={node_mgr}", f"--object-manager-port={obj_mgr}",
            f"--runtime-env-agent-port={env_agent}", f"--temp-dir={temp}", "--disable-usage-stats"]),
    }


def test_sbatch_allocates_starts_ray_runs_the_preflight_and_tears_down(slurm, tmp_path):
    import tempfile
    from pathlib import Path

    from tests.conftest import SPECS

    ip = subprocess.run(["hostname", "--ip-address"], capture_output=True, text=True).stdout.split()
    if ip[:1] != ["127.0.0.1"]:
        pytest.skip(f"this host's name resolves to {ip}, not 127.0.0.1: the script's Ray head would leave the "
                    "loopback")
    short = Path(tempfile.mkdtemp(prefix="fp8s-", dir="/tmp"))  # Ray's socket paths must fit 107 bytes
    bundle, _ = launchable_bundle(SPECS / "qwen3-8b.yaml", tmp_path)
    plant_pins(bundle)
    expected = json.loads((bundle / "preflight.json").read_text())
    mark = os.urandom(8).hex()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RAY_"))}
    env["RAY_AUTH_MODE"] = "disabled"  # as the suite's other clusters (tests/conftest.py): no token on the loopback
    env.update(slurm.env)
    env.update(ray_env(short, mark))
    # The preflight refuses a Ray cluster with fewer logical CPUs than verl's main_ppo takes (preflight.json
    # ray_cpus); this machine's node has 2 cores, so its head declares the count, as the bundle README says
    need = expected["ray_cpus"]["before_gpus"] + expected["ray_cpus"]["per_gpu"] * 8  # qwen3-8b: 1 node x 8 GPUs
    env["FP8SPEC_RAY_START_ARGS"] += f" --num-cpus={need}"
    out = tmp_path / "job.out"
    try:
        proc = subprocess.run(["sbatch", "--wait", f"--output={out}", "--parsable", "slurm.sbatch",
                               "--skip-gpu-checks", "--preflight-only"],
                              cwd=bundle, env=env, capture_output=True, text=True, timeout=420)
        log = out.read_text() if out.exists() else ""
        assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{log[-6000:]}"
        job_id = proc.stdout.strip().split(";")[0]

        # allocation, Ray head through srun, the wait for the allocated GPUs, the preflight, teardown
        assert f"slurm.sbatch: Ray head on {slurm.node} (127.0.0.1:{env['FP8SPEC_RAY_PORT']}), 0 worker node(s)" \
            in log
        assert "slurm.sbatch: Ray reports 8 GPUs on 1 node(s)" in log
        results = {line for line in log.splitlines() if line.startswith(RESULT_TAG)}
        assert len(results) == 1, log[-6000:]
        result = json.loads(results.pop()[len(RESULT_TAG):])
        assert result["ok"] is True and result["mode"] == "ray, GPU checks skipped"
        (node,) = [n for n in result["nodes"] if n["node"] != "cluster"]
        rows = {r["check"]: r for r in node["rows"]}
        for name, value in expected["env"].items():
            assert rows[f"env {name}"]["found"] == value and rows[f"env {name}"]["status"] == "PASS"
        assert rows["runtime fp8spec.runtime"]["status"] == "PASS"
        assert "/runtime_resources/py_modules_files/" in rows["runtime fp8spec.runtime"]["found"]
        assert rows["model config.json"]["status"] == "PASS"
        assert "PREFLIGHT PASSED" in log
        assert "submit.sh: the preflight passed; --preflight-only, so the training job was not submitted" in log
        assert "slurm.sbatch: stopping Ray on 1 node(s)" in log

        state = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
        assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state
        # every process the job started (Ray head, its workers) is gone
        deadline = time.time() + 30
        while _marked_tree(mark) and time.time() < deadline:
            time.sleep(1)
        assert not _marked_tree(mark)
    finally:
        _stop_marked(mark)
        subprocess.run(["rm", "-rf", str(short)])


def test_allocation_smaller_than_the_spec_is_refused(slurm, tmp_path):
    """The 2-node example on a 1-node allocation (sbatch --nodes=1 overrides the script's 2): the script
    stops before starting Ray, naming both counts."""
    from tests.conftest import SPECS
    from tests.launchers.conftest import compile_bundle

    bundle = compile_bundle(SPECS / "qwen3-30b.yaml", tmp_path / "out")
    out = tmp_path / "job.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RAY_"))}
    env["RAY_AUTH_MODE"] = "disabled"  # as the suite's other clusters (tests/conftest.py): no token on the loopback
    env.update(slurm.env)
    proc = subprocess.run(["sbatch", "--wait", f"--output={out}", "--nodes=1", "--partition=debug",
                           "slurm.sbatch"], cwd=bundle, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert out.read_text().strip() == "slurm.sbatch: the allocation has 1 node(s), the spec wants 2"
