"""Schema snapshots of the released backend packages fp8spec compiles for.

Snapshots are extracted from the real released artifacts (wheels downloaded through pip into a cache),
never written by hand, and stored as ``backends/snapshots/<package>-<version>.json`` together with the
artifact's file name and sha256. vLLM, SGLang, megatron-core and TransformerEngine are read statically
with ``ast`` (never imported); verl's Hydra config tree is composed from the wheel's YAML files.

Library entry points (the CLI mounts these):

- :func:`refresh` (``"vllm==0.33.0"`` -> path written), :func:`refresh_all`
- :func:`verify` (path -> list of differences; empty means the artifact still confirms the snapshot)
- :func:`check` (facts per spec -> :class:`FactResult` list), :func:`load` -> :class:`Snapshot`
- :mod:`fp8spec.snapshots.drift` (a profile's facts against its snapshot, and a newer release's)

A rollout engine's extractor is in its folder (fp8spec/engines/<name>/snapshot.py), megatron-core's in
fp8spec/trainers/megatron/snapshot.py (with :mod:`fp8spec.trainers.megatron.config_check`, Megatron's own ``TransformerConfig``
validation on CPU).
"""

from .artifacts import ArtifactError, cache_root, parse_spec, wheel_cache
from .core import (
    PACKAGES,
    SnapshotError,
    SnapshotFormatError,
    build_snapshot,
    committed_specs,
    download,
    dumps,
    list_snapshots,
    read_snapshot,
    refresh,
    refresh_all,
    snapshot_dir,
    snapshot_path,
    verify,
    verify_all,
)
from .query import Fact, FactResult, Snapshot, check, check_source, load

__all__ = [
    "ArtifactError",
    "Fact",
    "FactResult",
    "PACKAGES",
    "Snapshot",
    "SnapshotError",
    "SnapshotFormatError",
    "build_snapshot",
    "committed_specs",
    "cache_root",
    "check",
    "check_source",
    "download",
    "dumps",
    "list_snapshots",
    "load",
    "parse_spec",
    "read_snapshot",
    "refresh",
    "refresh_all",
    "snapshot_dir",
    "snapshot_path",
    "verify",
    "verify_all",
    "wheel_cache",
]
