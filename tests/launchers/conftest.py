"""Fixtures for the launcher tests: compiled bundles on disk, and one real local Ray head for the session.

The Ray head listens on 127.0.0.1 only: every port is chosen free on the loopback, and
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray from replacing 127.0.0.1 by the machine's address (with it,
every Ray server binds the loopback). It is stopped at the end by process id (the processes carrying this
session's marker in their environment, and their children), not with `ray stop`, which would stop every
Ray instance of the user on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from fp8spec.profiles import load_profile
from tests.cli.inprocess import run_cli_here
from tests.conftest import SPECS, skip_missing_extra

VENV_BIN = Path(sys.executable).parent
MARK_VAR = "FP8SPEC_TEST_RAY_MARK"
# Logical CPUs the head offers (a scheduling count, not cores): exactly what verl 0.9.1 asks for before it asks
# for GPUs (backends/verl/0.9.1.yaml requirement.ray_cpus_before_gpus: its TransferQueue controller and 8 storage
# units), so every launch test here also shows that number is enough (test_verl_cpu_need.py shows one less is not).
HEAD_CPUS = load_profile("verl", "0.9.1").value("requirement.ray_cpus_before_gpus")


def compile_bundle(spec_path: Path, out_dir: Path, backend: str | None = None) -> Path:
    """Compile exactly as `fp8spec compile` does (its entry point, in this process: tests/cli/inprocess.py) and
    return the bundle folder."""
    args = ["compile", str(spec_path), "-o", str(out_dir), "--force"]
    if backend:
        args += ["--backend", backend]
    proc = run_cli_here(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = [p for p in out_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return folder


@pytest.fixture(scope="session")
def bundle_8b(tmp_path_factory) -> Path:
    """The qwen3-8b example (fsdp+vllm, kv_scales runtime patch, 1 node x 8 GPUs), compiled once."""
    return compile_bundle(SPECS / "qwen3-8b.yaml", tmp_path_factory.mktemp("b8"))


@pytest.fixture(scope="session")
def bundle_30b(tmp_path_factory) -> Path:
    """The qwen3-30b example (megatron+vllm, launcher slurm, 2 nodes x 8 GPUs), compiled once."""
    return compile_bundle(SPECS / "qwen3-30b.yaml", tmp_path_factory.mktemp("b30"))


@pytest.fixture
def bundle_copy(tmp_path):
    """A private copy of a bundle that a test may edit (plant mismatches, stub files)."""

    def copy(bundle: Path, name: str = "bundle") -> Path:
        target = tmp_path / name
        shutil.copytree(bundle, target)
        return target

    return copy


# --- a real local Ray head ------------------------------------------------------------------------


@dataclass
class RayHead:
    dashboard: str  # http://127.0.0.1:PORT, for `ray job submit --address`
    gcs: str
    env: dict
    temp_dir: Path


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _marked_tree(mark: str) -> set[int]:
    """Live processes whose environment carries ``mark``, and all their descendants."""
    needle = f"{MARK_VAR}={mark}".encode()
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            parents[pid] = int(fields[1])
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    marked.add(pid)
        except (OSError, IndexError, ValueError):
            continue
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in marked and pid not in marked:
                marked.add(pid)
                grew = True
    return marked


def _stop_marked(mark: str) -> None:
    for sig, pause in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 1.0)):
        pids = _marked_tree(mark)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + pause
        while time.time() < deadline and _marked_tree(mark):
            time.sleep(0.2)


@contextlib.contextmanager
def start_ray_head(num_cpus: int):
    """A real Ray head on loopback offering ``num_cpus`` logical CPUs and no GPUs; stopped (by id) on exit."""
    ray_cli = VENV_BIN / "ray"
    if not ray_cli.exists():
        ray_cli = Path(shutil.which("ray") or "")
    try:
        import ray  # noqa: F401
    except ImportError:
        skip_missing_extra("ray is not installed (pip install 'ray[default]'): the real-Ray launcher tests need it")
    if not ray_cli.is_file():
        skip_missing_extra("the `ray` command is not installed beside this Python")
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to stop the test's Ray processes by id")
    mark = uuid.uuid4().hex
    temp_dir = Path(tempfile.mkdtemp(prefix="fp8r-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    (gcs, dash, client, agent_http, agent_grpc, metrics, node_mgr, obj_mgr, env_agent, autoscaler_metrics,
     dashboard_metrics) = _free_ports(11)
    env = dict(os.environ)
    env.update({
        MARK_VAR: mark,
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address stays 127.0.0.1, servers bind the loopback
        "AUTOSCALER_METRIC_PORT": str(autoscaler_metrics),
        "DASHBOARD_METRIC_PORT": str(dashboard_metrics),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
        # the example specs log to wandb, whose key the preflight checks (and submit.sh passes on); a well-formed
        # dummy, never used: no job here reaches wandb
        "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    })
    env.pop("RAY_ADDRESS", None)
    cmd = [str(ray_cli), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
           f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--metrics-export-port={metrics}", f"--node-manager-port={node_mgr}",
           f"--object-manager-port={obj_mgr}", f"--runtime-env-agent-port={env_agent}",
           f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, f"ray start failed:\n{proc.stdout}\n{proc.stderr}"
        yield RayHead(dashboard=f"http://127.0.0.1:{dash}", gcs=f"127.0.0.1:{gcs}", env=env, temp_dir=temp_dir)
    finally:
        _stop_marked(mark)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_head():
    with start_ray_head(HEAD_CPUS) as head:
        yield head
