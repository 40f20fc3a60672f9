"""Slurm: slurm.sbatch, a Ray cluster over ``hardware.nodes`` Slurm nodes (head on the batch node, one worker per
other node), then submit.sh, then teardown. Extra #SBATCH options are judged by rule LCH001."""

from __future__ import annotations

from fp8spec.launchers import get_launcher
from fp8spec.launchers.launch import Launch

LAUNCHER = get_launcher("slurm")
RAY_PORT = 6379
DASHBOARD_PORT = 8265


def render(launch: Launch) -> str:
    from fp8spec.compiler.templates import render as render_template

    spec = launch.valid.spec
    return render_template(
        LAUNCHER.template,
        slurm=spec.cluster.slurm,
        job_name=spec.name,
        ray_port=RAY_PORT,
        dashboard_port=DASHBOARD_PORT,
        **launch.common,
    )


def readme(launch: Launch) -> str:
    hw = launch.valid.spec.hardware
    return (
        f"{hw.nodes} node(s) x {hw.gpus_per_node} GPUs, a Ray head on the batch\n"
        "    node and a worker on every other node, waits for all GPUs, runs `submit.sh --wait`, stops Ray on exit"
    )
