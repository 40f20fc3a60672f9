"""What a launcher is (one row of the table: its name, its file, its template), as data.

The spec model reads the table for ``cluster.launcher``'s choices, so nothing here imports any other part of
fp8spec; what a launcher is given to render is fp8spec.launchers.launch's.
"""

from __future__ import annotations

from dataclasses import dataclass

# The worker pods' own shared-memory volume (rayjob.yaml): a spec volume may not take its name or path. Here, not in
# kuberay.py, because the spec model reads it (cluster.kuberay.volumes) and kuberay.py reads the spec's reward file.
POD_SHM_VOLUME = ("dshm", "/dev/shm")


@dataclass(frozen=True)
class Launcher:
    name: str  # cluster.launcher's value
    file: str  # the bundle file it writes
    template: str  # its template under templates/
    run: str  # how the bundle README tells you to start it
    summary: str  # what it is, in the cluster.launcher field's description
    executable: bool = True  # written with the executable bit


class BundleError(Exception):
    """The spec compiles, but a launcher file would be refused by the system it is for (exit 1)."""


def submission_id(spec_name: str, backend: str, spec_sha256: str) -> str:
    return f"fp8spec-{spec_name}-{backend.replace('+', '-')}-{spec_sha256[:12]}"
