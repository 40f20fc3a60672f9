"""A real single-node Slurm for the tests: MUNGE, slurmctld and slurmd of Debian's slurm-wlm, loopback only.

How it starts (``start``): when ``sbatch``/``slurmctld``/``slurmd``/``munged`` are missing and the tests run
as root with apt-get (CI: a clean Debian 12 machine), ``apt-get install -y slurm-wlm munge`` installs them.
Then, everything under one temporary folder: munged on a private socket (as the munge user, with the key the
package created), a slurm.conf with free loopback ports for slurmctld and slurmd, the node at 127.0.0.1 with
``Gres=gpu:8`` backed by 8 plain files (Slurm's GPU accounting only: there is no device; the bundle's CPU-only
switch --skip-gpu-checks keeps the preflight from judging GPUs), and ``slurmctld -f`` / ``slurmd -f`` started
as root. It waits until ``sinfo`` shows the node idle.
How it stops (``stop``): SIGTERM to slurmd, slurmctld and munged by the pids in their pid files, SIGKILL
after 15 s, then the folder is removed. Nothing else on the machine is touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
COMMANDS = ("sbatch", "srun", "scontrol", "sinfo", "slurmctld", "slurmd", "munged")
GPUS = 8


class Unavailable(Exception):
    """Slurm cannot be had on this machine (the reason says why)."""


@dataclass
class Slurm:
    root: Path
    conf: Path
    node: str
    pids: dict = field(default_factory=dict)

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ensure_installed() -> None:
    missing = [c for c in COMMANDS if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"Slurm is not installed ({', '.join(missing)} missing) and this is not root with "
                          f"apt-get to install {' '.join(PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise Unavailable(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def start() -> Slurm:
    if os.geteuid() != 0:
        raise Unavailable("slurmd and munged run as root/munge here: the Slurm tests need root")
    ensure_installed()
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        raise Unavailable(f"{key} is missing (the munge package creates it)")
    root = Path(tempfile.mkdtemp(prefix="fp8slurm-", dir="/tmp"))
    root.chmod(0o755)
    munge = root / "munge"
    munge.mkdir(mode=0o755)
    shutil.chown(munge, "munge", "munge")
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    node = socket.gethostname().split(".")[0]
    slurm = Slurm(root=root, conf=root / "slurm.conf", node=node)
    try:
        subprocess.run(["runuser", "-u", "munge", "--", "munged", f"--socket={munge}/munge.sock",
                        f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                        f"--seed-file={munge}/munged.seed"], check=True, capture_output=True, timeout=60)
        slurm.pids["munged"] = munge / "munged.pid"
        ctld_port, d_port = _free_ports(2)
        memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.5)
        devices = [root / f"gpu{i}" for i in range(GPUS)]
        for d in devices:
            d.touch()
        slurm.conf.write_text("\n".join([
            "ClusterName=fp8spectest", f"SlurmctldHost={node}(127.0.0.1)", f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={d_port}", "AuthType=auth/munge", f"AuthInfo=socket={munge}/munge.sock",
            "CredType=cred/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
            "ReturnToService=2", "MpiDefault=none", "GresTypes=gpu",
            f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory} Gres=gpu:{GPUS} "
            "State=UNKNOWN",
            f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP", ""]))
        (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File={root}/gpu[0-{GPUS - 1}]\n")
        env = dict(os.environ, **slurm.env)
        for daemon in ("slurmctld", "slurmd"):
            proc = subprocess.run([daemon, "-f", str(slurm.conf)], env=env, capture_output=True, text=True,
                                  timeout=60)
            if proc.returncode != 0:
                raise Unavailable(f"{daemon} did not start: {proc.stderr.strip()[-500:]}")
            slurm.pids[daemon] = root / f"{daemon}.pid"
        deadline = time.time() + 90
        state = ""
        while time.time() < deadline:
            state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], env=env, capture_output=True,
                                   text=True, timeout=30).stdout.strip()
            if state == "idle":
                return slurm
            time.sleep(1)
        log = (root / "log" / "slurmctld.log").read_text(errors="replace")[-1500:]
        raise Unavailable(f"the Slurm node did not become idle (state {state!r}):\n{log}")
    except BaseException:
        stop(slurm)
        raise


def stop(slurm: Slurm) -> None:
    for daemon in ("slurmd", "slurmctld", "munged"):
        path = slurm.pids.get(daemon)
        pid = _pid(path) if path else None
        if pid is None:
            continue
        for sig, pause in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + pause
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                continue
            break
    shutil.rmtree(slurm.root, ignore_errors=True)
