"""Cluster launchers of a trainer bundle: one table of rows (data), and one module plus one template per launcher.

``LAUNCHERS`` is the table: each row (a ``base.Launcher``: name, file, template, how to run it) is data the
spec format reads for ``cluster.launcher``'s choices, in the table's order. What a launcher writes is the module
named after it (``fp8spec/launchers/<name>.py``: ``render(launch) -> str | None`` and ``readme(launch) -> str``),
bound to its row by the compiler (fp8spec.launchers.launch), so reading the table imports no renderer. The
bundle README's lines and the files written come from the same table (torchtune's recipe registry is the model:
one list drives every command).
Every trainer bundle gets every launcher, whichever one the spec names (the README says which): the cluster section
is where the run goes today, and moving it should not need a new compile. Each launcher first runs the preflight
(preflight.py + preflight.json, fp8spec.launchers.preflight), whose files every trainer bundle carries.

The submission id is deterministic: ``fp8spec-<spec name>-<backend>-<first 12 hex of the spec sha256>`` (the
preflight's adds ``-preflight``), so the same spec cannot be submitted twice to one cluster by accident.
"""

from __future__ import annotations

from fp8spec.launchers.base import Launcher

LAUNCHERS: tuple[Launcher, ...] = (
    Launcher(
        name="ray",
        file="submit.sh",
        template="submit.sh.j2",
        run="run `bash submit.sh`",
        summary="submit.sh, `ray job submit`",
    ),
    Launcher(
        name="slurm",
        file="slurm.sbatch",
        template="slurm.sbatch.j2",
        run="run `sbatch slurm.sbatch` from this folder (Slurm's log goes beside it: `../<spec name>-<job id>.out`)",
        summary="slurm.sbatch",
    ),
    Launcher(
        name="kuberay",
        file="rayjob.yaml",
        template="rayjob.yaml.j2",
        run="run `kubectl apply -f rayjob.yaml`",
        summary="rayjob.yaml",
        executable=False,
    ),
)


def launchers() -> tuple[Launcher, ...]:
    """The table, in order."""
    return LAUNCHERS


def launcher_names() -> tuple[str, ...]:
    return tuple(row.name for row in launchers())


def get_launcher(name: str) -> Launcher:
    return next(row for row in launchers() if row.name == name)


def executable_files() -> frozenset[str]:
    """The launcher files written with the executable bit."""
    return frozenset(row.file for row in launchers() if row.executable)
