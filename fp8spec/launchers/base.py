"""What a launcher is (one row of the table: its name, its file, its template) and what it is given to render.

Kept light: the spec model reads the table for ``cluster.launcher``'s choices, so nothing here imports the
compiler beyond quoting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fp8spec.quoting import json_scalar, yaml_string_list, yaml_string_map

if TYPE_CHECKING:
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.resolve.valid import ValidSpec


# The worker pods' own shared-memory volume (rayjob.yaml): a spec volume may not take its name or path. Here, not in
# kuberay.py, because the spec model reads it (cluster.kuberay.volumes) and kuberay.py reads the spec's reward file.
POD_SHM_VOLUME = ("dshm", "/dev/shm")


@dataclass(frozen=True)
class Launcher:
    name: str  # cluster.launcher's value
    file: str  # the bundle file it writes
    template: str  # its template under templates/
    order: int  # its place in the table: the spec's choices, the bundle README
    run: str  # how the bundle README tells you to start it
    summary: str  # what it is, in the cluster.launcher field's description
    executable: bool = True  # written with the executable bit


@dataclass(frozen=True)
class Launch:
    """A trainer bundle as its launchers see it: the valid spec, its settings, the files written so far (the
    preflight's among them) and the values every launcher template shares."""

    valid: ValidSpec
    backend: str  # e.g. "megatron+vllm"
    plan: SettingsPlan
    files: dict[str, str]
    common: dict[str, Any] = field(default_factory=dict)


def runtime_env_yaml(plan: SettingsPlan, working_dir: str, bundle_dir: str = "", comment: bool = True) -> str:
    """The one place the bundle's Ray runtime environment is written: every job gets it (submit.sh,
    slurm.sbatch through submit.sh, rayjob.yaml), and launch.sh run by hand passes the same to ray.init.
    ``bundle_dir``: where the bundle sits for the submitting `ray` (empty: its working directory)."""
    text = (
        (
            "# Ray runtime environment of the preflight and training jobs: "
            "ray job submit --runtime-env runtime_env.yaml\n"
        )
        if comment
        else ""
    )
    text += f"working_dir: {json_scalar(working_dir)}\n"
    if plan.py_modules:
        folders = [f"{bundle_dir}/{f}" if bundle_dir else f for f in plan.py_modules]
        text += "py_modules:\n" + yaml_string_list(folders, indent=2)
    return text + "env_vars:\n" + yaml_string_map(plan.env, indent=2)


class BundleError(Exception):
    """The spec compiles, but a launcher file would be refused by the system it is for (exit 1)."""


def submission_id(spec_name: str, backend: str, spec_sha256: str) -> str:
    return f"fp8spec-{spec_name}-{backend.replace('+', '-')}-{spec_sha256[:12]}"
