"""Ray job submission: submit.sh, ``ray job submit`` of the preflight job, then of launch.sh when it passed."""

from __future__ import annotations

from fp8spec.launchers import get_launcher
from fp8spec.launchers.launch import Launch
from fp8spec.quoting import md_code

LAUNCHER = get_launcher("ray")


def render(launch: Launch) -> str:
    from fp8spec.compiler.templates import render as render_template

    return render_template(LAUNCHER.template, address=launch.valid.spec.cluster.address, **launch.common)


def readme(launch: Launch) -> str:
    return (
        f"`ray job submit` to {md_code(launch.valid.spec.cluster.address)} (or `--address`): the preflight job, "
        "then\n"
        "    `bash launch.sh` with `runtime_env.yaml` only when it passed (`--help` lists the options)"
    )
