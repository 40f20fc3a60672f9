"""Stub cluster commands (ray, srun, sbatch, scontrol, sleep) that record their argv as JSON lines.

Each stub appends {"cmd": name, "argv": [...], "cwd": ...} to $STUB_LOG and then behaves just enough like the
real command for the launcher scripts to run on a machine without Slurm or a Ray cluster.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

_RECORD = r'''
import json, os, sys
def record(name):
    with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"cmd": name, "argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid()}) + "\n")
'''

RAY = _RECORD + r'''
record("ray")
args = sys.argv[1:]
if "--runtime-env" in args:  # what the job would get: the file may be a temporary one, gone after the script
    with open(args[args.index("--runtime-env") + 1], encoding="utf-8") as env_file, \
            open(os.environ["STUB_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"cmd": "ray-runtime-env", "text": env_file.read(), "cwd": os.getcwd()}) + "\n")
if args[:2] == ["job", "submit"]:
    entry = args[args.index("--") + 1:]
    which = "preflight" if any(a.endswith("preflight.py") for a in entry) else "training"
    print(f"stub ray: {which} job submitted: {entry}")
    rc = int(os.environ.get(f"STUB_{which.upper()}_RC", "0"))
    if rc:
        print(f"stub ray: Job '{which}' failed")
    sys.exit(rc)
if args[:2] == ["job", "status"]:
    print(os.environ.get("STUB_STATUS", "Job '{}' succeeded").format(args[-1]))
    sys.exit(0)
if args[:1] == ["status"]:
    counter = os.environ["STUB_LOG"] + ".status"
    calls = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(calls))
    schedule = os.environ.get("STUB_GPUS", "0").split(",")
    gpus = schedule[min(calls, len(schedule)) - 1]
    print("Resources\n---------------------------------------------------------------\nTotal Usage:")
    print(f" 0.0/64.0 CPU\n 0.0/{gpus}.0 GPU\n 0B/1.00TiB memory")
    sys.exit(0)
if args[:1] == ["start"] and "--block" in args:
    os.execv("/bin/sleep", ["sleep", "300"])  # a ray node that runs until the script stops it
sys.exit(0)
'''

SRUN = _RECORD + r'''
record("srun")
args = sys.argv[1:]
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in ("-w", "--nodelist") else 1
command = args[i:]
if command[:1] == ["hostname"]:
    node = args[args.index("-w") + 1]
    print("10.0.0.%d fd00::1" % (1 + sorted(os.environ["STUB_NODES"].split(",")).index(node)))
    sys.exit(0)
os.execvp(command[0], command)
'''

SCONTROL = _RECORD + r'''
record("scontrol")
if sys.argv[1:3] == ["show", "hostnames"]:
    print("\n".join(sys.argv[3].split(",")))
'''

SLEEP = _RECORD + r'''
record("sleep")
'''

SBATCH = _RECORD + r'''
import re, subprocess
record("sbatch")
script, args = sys.argv[1], sys.argv[2:]
directives = []
for line in open(script, encoding="utf-8").read().splitlines()[1:]:
    if not line.startswith("#"):
        break
    if line.startswith("#SBATCH "):
        directives.append(line[len("#SBATCH "):])
with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as fh:
    fh.write(json.dumps({"cmd": "#SBATCH", "argv": directives}) + "\n")
nodes = int(next(d.split("=")[1] for d in directives if d.startswith("--nodes=")))
hosts = os.environ.get("STUB_NODES") or ",".join(f"gpu-{i}" for i in range(1, nodes + 1))
env = dict(os.environ, SLURM_JOB_NODELIST=hosts, SLURMD_NODENAME=hosts.split(",")[0], SLURM_JOB_ID="4242",
           SLURM_SUBMIT_DIR=os.getcwd(), STUB_NODES=hosts)
sys.exit(subprocess.run(["bash", script, *args], env=env).returncode)
'''


def install(bin_dir: Path, python: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in (("ray", RAY), ("srun", SRUN), ("scontrol", SCONTROL), ("sleep", SLEEP), ("sbatch", SBATCH)):
        path = bin_dir / name
        path.write_text(f"#!{python}\n{body}", encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def env_with_stubs(bin_dir: Path, log: Path, **extra: str) -> dict:
    # no credential of the machine running the tests either: the scripts pass those on when set
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RAY_", "WANDB_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["STUB_LOG"] = str(log)
    env.update(extra)
    return env


def calls(log: Path, cmd: str | None = None) -> list[dict]:
    if not log.exists():
        return []
    out = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return [c for c in out if cmd is None or c["cmd"] == cmd]
