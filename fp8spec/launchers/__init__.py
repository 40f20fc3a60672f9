"""Cluster launchers of a trainer bundle: one table, and one module plus one template per launcher.

Every module here that defines ``LAUNCHER`` (a ``base.Launcher`` row: name, file, template, how to run it) and
``render(launch) -> str | None`` and ``readme(launch) -> str`` is a launcher; the table lists them in their
``order``. The spec's ``cluster.launcher`` choices, the bundle README's lines and the files written all come
from it (torchtune's recipe registry is the model: one list drives every command). Every trainer bundle gets
every launcher, whichever one the spec names (the README says which): the cluster section is where the run
goes today, and moving it should not need a new compile. Each launcher first runs the preflight (preflight.py
+ preflight.json, fp8spec.launchers.preflight), whose files every trainer bundle carries.

The submission id is deterministic: ``fp8spec-<spec name>-<backend>-<first 12 hex of the spec sha256>`` (the
preflight's adds ``-preflight``), so the same spec cannot be submitted twice to one cluster by accident.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING

from fp8spec.launchers.base import Launch, Launcher

if TYPE_CHECKING:
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.resolve.valid import ValidSpec


@lru_cache(maxsize=1)
def _table() -> tuple[tuple[Launcher, ModuleType], ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        row = getattr(module, "LAUNCHER", None)
        if isinstance(row, Launcher):
            found.append((row, module))
    return tuple(sorted(found, key=lambda rm: rm[0].order))


def launchers() -> tuple[Launcher, ...]:
    """The table, in order."""
    return tuple(row for row, _ in _table())


def launcher_names() -> tuple[str, ...]:
    return tuple(row.name for row in launchers())


def get_launcher(name: str) -> Launcher:
    return next(row for row in launchers() if row.name == name)


def executable_files() -> frozenset[str]:
    """The launcher files written with the executable bit."""
    return frozenset(row.file for row in launchers() if row.executable)


def launcher_files(
    valid: ValidSpec, backend: str, plan: SettingsPlan, files: dict[str, str]
) -> dict[str, str]:
    """The preflight's files and every launcher's file of a trainer bundle. ``files`` are the bundle files
    rendered so far (rayjob.yaml's ConfigMap carries launch.sh from them)."""
    from fp8spec.launchers.preflight import preflight_files

    out = preflight_files(valid, backend, plan)
    launch = Launch(valid, backend, plan, {**files, **out}, launch_values(valid, backend))
    for row, module in _table():
        text = module.render(launch)
        if text is not None:  # rayjob.yaml: not when no image is known (rule CLU001 when kuberay is chosen)
            out[row.file] = text
    return out


def readme_lines(valid: ValidSpec, backend: str, plan: SettingsPlan) -> list[tuple[str, str]]:
    """(file, what it does) of every launcher, for the bundle README."""
    launch = Launch(valid, backend, plan, {}, launch_values(valid, backend))
    return [(row.file, module.readme(launch)) for row, module in _table()]


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
