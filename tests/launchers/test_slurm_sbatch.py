"""slurm.sbatch on multi-node allocations, which the single-node Slurm of CI cannot give
(tests/launchers/test_real_slurm.py runs it through real Slurm and Ray on one node): run through stub
sbatch/srun/scontrol/ray that record their argv, it allocates hardware.nodes nodes, starts one Ray node per
Slurm node with the spec's GPU count, waits for all GPUs, runs the preflight before the training job, and
stops every `ray start` step on the way out (never a machine-wide `ray stop`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import BASE_SPEC, patched
from tests.launchers import stubs
from tests.launchers.conftest import compile_bundle


@pytest.fixture
def sbatch(tmp_path):
    bin_dir = tmp_path / "bin"
    stubs.install(bin_dir, sys.executable)
    log = tmp_path / "calls.jsonl"

    def run(bundle, *args, **env):
        proc = subprocess.run(["sbatch", "slurm.sbatch", *args], cwd=bundle,
                              env=stubs.env_with_stubs(bin_dir, log, **env), capture_output=True, text=True,
                              timeout=60)
        return proc, stubs.calls(log)

    return run


def srun_commands(calls):
    """(srun options as a dict, the command it runs) for every srun call."""
    out = []
    for c in calls:
        if c["cmd"] != "srun":
            continue
        args, opts, i = c["argv"], {}, 0
        while i < len(args) and args[i].startswith("-"):
            if args[i] == "-w":
                opts["-w"] = args[i + 1]
                i += 2
            else:
                key, _, value = args[i].partition("=")
                opts[key] = value
                i += 1
        out.append((opts, args[i:]))
    return out


def flag(command, name):
    return next(a.split("=", 1)[1] for a in command if a.startswith(name + "="))


def pids_alive(calls) -> list[int]:
    alive = []
    for c in calls:
        if c["cmd"] == "ray" and c["argv"][:1] == ["start"]:
            try:
                os.kill(c["pid"], 0)
                alive.append(c["pid"])
            except ProcessLookupError:
                pass
    return alive


def test_bash_syntax(bundle_8b, bundle_30b):
    for bundle in (bundle_8b, bundle_30b):
        proc = subprocess.run(["bash", "-n", str(bundle / "slurm.sbatch")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_two_nodes_of_eight_gpus(sbatch, bundle_30b):
    """qwen3-30b: 2 nodes x 8 GPUs, launcher slurm, partition gpu, 48 h."""
    proc, calls = sbatch(bundle_30b, STUB_GPUS="8,8,16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (directives,) = [c["argv"] for c in calls if c["cmd"] == "#SBATCH"]
    assert directives == ["--job-name=qwen3-30b-a3b-fp8-e2e", "--nodes=2", "--ntasks-per-node=1",
                          "--gpus-per-node=8", "--exclusive", "--time=48:00:00", "--partition=gpu",
                          "--output=../%x-%j.out"]
    sruns = srun_commands(calls)
    starts = [(o, cmd) for o, cmd in sruns if cmd[:2] == ["ray", "start"]]
    heads = [(o, cmd) for o, cmd in starts if "--head" in cmd]
    workers = [(o, cmd) for o, cmd in starts if "--head" not in cmd]
    assert len(heads) == 1 and len(workers) == 1
    (head_opts, head_cmd), = heads
    assert head_opts["-w"] == "gpu-1" and head_opts["--nodes"] == "1" and head_opts["--gpus-per-node"] == "8"
    assert flag(head_cmd, "--node-ip-address") == "10.0.0.1" and flag(head_cmd, "--port") == "6379"
    assert flag(head_cmd, "--dashboard-host") == "127.0.0.1"
    assert "--block" in head_cmd
    worker_opts, worker_cmd = workers[0]
    assert worker_opts["-w"] == "gpu-2" and worker_opts["--gpus-per-node"] == "8"
    assert flag(worker_cmd, "--address") == "10.0.0.1:6379"
    # one Ray node per Slurm node, every one with gpus_per_node GPUs: 16 in all
    assert sorted(o["-w"] for o, _ in starts) == ["gpu-1", "gpu-2"]
    assert sum(int(flag(cmd, "--num-gpus")) for _, cmd in starts) == 16
    # waited until Ray reported all 16 GPUs (8, 8, then 16), sleeping between polls
    statuses = [c for c in calls if c["cmd"] == "ray" and c["argv"][:1] == ["status"]]
    assert len(statuses) == 3 and all(c["argv"][1] == "--address=10.0.0.1:6379" for c in statuses)
    assert sum(c["cmd"] == "sleep" and c["argv"] == ["5"] for c in calls) == 2
    # then the preflight job, then the training job (followed to its end: no --no-wait)
    jobs = [c["argv"] for c in calls if c["cmd"] == "ray" and c["argv"][:2] == ["job", "submit"]]
    assert [j[j.index("--") + 1:] for j in jobs] == [["python3", "./preflight.py"], ["bash", "./launch.sh"]]
    assert all(j[j.index("--address") + 1] == "http://127.0.0.1:8265" for j in jobs)
    assert "--no-wait" not in jobs[1]
    order = [i for i, c in enumerate(calls) if c["cmd"] == "ray" and c["argv"][:1] in (["status"], ["job"])]
    assert order == sorted(order)
    # teardown: the ray start steps are stopped by pid; no `ray stop`, which would hit every Ray on the node
    assert not any(c["cmd"] == "ray" and c["argv"][:1] == ["stop"] for c in calls)
    assert "stopping Ray on 2 node(s)" in proc.stdout
    assert pids_alive(calls) == []


def test_preflight_failure_stops_before_training_and_tears_down(sbatch, bundle_30b):
    proc, calls = sbatch(bundle_30b, STUB_GPUS="16", STUB_PREFLIGHT_RC="1")
    assert proc.returncode == 1
    jobs = [c["argv"] for c in calls if c["cmd"] == "ray" and c["argv"][:2] == ["job", "submit"]]
    assert len(jobs) == 1 and "./preflight.py" in jobs[0]
    assert pids_alive(calls) == []


def test_gives_up_when_gpus_never_appear(sbatch, bundle_30b):
    proc, calls = sbatch(bundle_30b, STUB_GPUS="8", FP8SPEC_RAY_WAIT_SECONDS="0")
    assert proc.returncode == 2
    assert "Ray reports 8 of 16 GPUs" in proc.stderr
    assert not any(c["cmd"] == "ray" and c["argv"][:1] == ["job"] for c in calls)
    assert pids_alive(calls) == []


def test_allocation_must_match_the_spec(sbatch, bundle_30b):
    proc, calls = sbatch(bundle_30b, STUB_NODES="gpu-1")
    assert proc.returncode == 2 and "the allocation has 1 node(s), the spec wants 2" in proc.stderr
    assert not any(c["cmd"] == "srun" for c in calls)


def test_slurm_settings_from_the_spec(sbatch, write_spec, tmp_path):
    spec = write_spec(patched(BASE_SPEC, {"name": "slurm-x", "hardware": {"nodes": 4, "gpus_per_node": 4},
                                          "rollout": {"tp": 2},
                                          "cluster": {"launcher": "slurm", "slurm": {
                                              "partition": "h100-long", "account": "rl_team",
                                              "time_limit": "2-00:00:00",
                                              "extra_sbatch": ["--qos=high", "--exclude=node[01-04]"]}}}))
    bundle = compile_bundle(spec, tmp_path / "out")
    proc, calls = sbatch(bundle, STUB_GPUS="16")
    assert proc.returncode == 0, proc.stderr
    (directives,) = [c["argv"] for c in calls if c["cmd"] == "#SBATCH"]
    assert directives == ["--job-name=slurm-x", "--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=4",
                          "--exclusive", "--time=2-00:00:00", "--partition=h100-long", "--account=rl_team",
                          "--output=../%x-%j.out", "--qos=high", "--exclude=node[01-04]"]
    starts = [(o, cmd) for o, cmd in srun_commands(calls) if cmd[:2] == ["ray", "start"]]
    assert sorted(o["-w"] for o, _ in starts) == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    assert [flag(cmd, "--num-gpus") for _, cmd in starts] == ["4", "4", "4", "4"]
    assert all(o["--gpus-per-node"] == "4" for o, _ in starts)


def test_spec_refuses_sbatch_options_it_writes_itself(validate):
    """Options the launcher writes, or that change its layout, are refused however sbatch would spell them
    (rule LCH001); malformed options are schema errors."""
    from pydantic import ValidationError

    from fp8spec.specfile.cluster import SlurmSettings

    for bad in (["--qos=$(id)"], ["--comment=two words"], ["-N 4"], ["--Nodes=4"]):
        with pytest.raises(ValidationError):
            SlurmSettings(extra_sbatch=bad)
    for bad in ("gpu partition", "gpu;id", "a'b"):
        with pytest.raises(ValidationError):
            SlurmSettings(partition=bad)
    for bad, text in (("--nodes=4", "from hardware.nodes"), ("--gpus-per-node=2", "hardware.gpus_per_node"),
                      ("--exclusive", "whole nodes"), ("--time=1:00:00", "cluster.slurm.time_limit"),
                      ("--partitio=x", "sbatch reads it as --partition"), ("--node=4", "ambiguous"),
                      ("--tasks-per-node=2", "--ntasks-per-node"), ("--tasks=2", "--tasks-per-node"),
                      ("--gres=gpu:8", "GPU"), ("--array=0-3", "once per array index"), ("--wrap=id", "replaces"),
                      ("--export=NONE", "environment"), ("--mem-per-g=8G", "abbreviation of --mem-per-gpu"),
                      ("--hold=1", "takes no value"), ("--qos", "needs a value"), ("--bogus=1", "no option")):
        found = [d for d in validate(patched(BASE_SPEC, {"cluster": {"slurm": {"extra_sbatch": [bad]}}})).diagnostics
                 if d.code == "LCH001"]
        assert len(found) == 1 and text in found[0].message, (bad, [d.message for d in found])
        assert found[0].path == "cluster.slurm.extra_sbatch.0"
