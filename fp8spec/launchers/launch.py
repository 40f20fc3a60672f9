"""A trainer bundle's launcher files: each row of the table (fp8spec.launchers) bound to the module named after it,
which renders the launcher's file and its line of the bundle README from a ``Launch``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fp8spec.launchers import launchers
from fp8spec.quoting import json_scalar, yaml_string_list, yaml_string_map

if TYPE_CHECKING:
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.launchers.base import Launcher
    from fp8spec.resolve.valid import ValidSpec


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


def _renderers() -> list[tuple[Launcher, ModuleType]]:
    return [(row, importlib.import_module(f"fp8spec.launchers.{row.name}")) for row in launchers()]


def launcher_files(
    valid: ValidSpec, backend: str, plan: SettingsPlan, files: dict[str, str]
) -> dict[str, str]:
    """The preflight's files and every launcher's file of a trainer bundle. ``files`` are the bundle files
    rendered so far (rayjob.yaml's ConfigMap carries launch.sh from them)."""
    from fp8spec.launchers.preflight import preflight_files

    out = preflight_files(valid, backend, plan)
    launch = Launch(valid, backend, plan, {**files, **out}, launch_values(valid, backend))
    for row, module in _renderers():
        text = module.render(launch)
        if text is not None:  # rayjob.yaml: not when no image is known (rule CLU001 when kuberay is chosen)
            out[row.file] = text
    return out


def readme_lines(valid: ValidSpec, backend: str, plan: SettingsPlan) -> list[tuple[str, str]]:
    """(file, what it does) of every launcher, for the bundle README."""
    launch = Launch(valid, backend, plan, {}, launch_values(valid, backend))
    return [(row.file, module.readme(launch)) for row, module in _renderers()]


def launch_values(valid: ValidSpec, backend: str) -> dict:
    """The values every launcher template shares."""
    from fp8spec import __version__
    from fp8spec.launchers.base import submission_id
    from fp8spec.launchers.preflight import credentials

    spec = valid.spec
    return {
        "spec": spec,
        "backend": backend,
        "fp8spec_version": __version__,
        "submission_id": submission_id(spec.name, backend, valid.sha256),
        "nodes": spec.hardware.nodes,
        "gpus_per_node": spec.hardware.gpus_per_node,
        "working_dir": spec.cluster.working_dir,
        "credential_envs": [c["env"] for c in credentials(spec)],
    }
