"""The packages fp8spec snapshots (one per profiled kind, fp8spec.targets.KINDS), how each is fetched and read,
and the errors a snapshot raises. Apart from core so that checking a snapshot file (checks) needs no reading code."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fp8spec.targets import ENGINES, KINDS

from . import artifacts as _art

if TYPE_CHECKING:
    from types import ModuleType


@dataclass(frozen=True)
class PackageInfo:
    name: str  # PyPI name, normalized
    module: (
        str  # the extractor module (a rollout engine's is in its folder: fp8spec/engines/<name>/snapshot.py)
    )
    python_versions: tuple[str, ...] = _art.PYTHON_VERSIONS
    ignore_requires_python: bool = False

    def extractor(self) -> ModuleType:
        return importlib.import_module(self.module)

    def request(
        self, version: str, python_version: str, expected_sha256: str | None = None
    ) -> _art.PipRequest:
        return _art.PipRequest(
            self.name, version, python_version, self.ignore_requires_python, expected_sha256
        )


# One extractor per profiled kind (fp8spec.targets.KINDS): a rollout engine's in its folder, megatron-core's in
# fp8spec/trainers/megatron/, the others here under the kind's name.
# megatron-core >= 0.17 declares Requires-Python >= 3.12 but still publishes cp311 wheels; take the cp311 wheel for
# every version (only its Python source is read), matching the profiles' source artifacts.
_EXTRACTOR_OPTIONS: dict[str, dict[str, Any]] = {
    "megatron-core": {
        "module": "fp8spec.trainers.megatron.snapshot",
        "python_versions": ("3.11",),
        "ignore_requires_python": True,
    },
}


def _extractor_module(kind: str) -> str:
    if kind in ENGINES:
        return f"fp8spec.engines.{kind}.snapshot"
    return f"fp8spec.snapshots.{kind.replace('-', '_')}"


PACKAGES: dict[str, PackageInfo] = {
    kind: PackageInfo(kind, **{"module": _extractor_module(kind), **_EXTRACTOR_OPTIONS.get(kind, {})})
    for kind in KINDS
}


class SnapshotError(RuntimeError):
    pass


class SnapshotFormatError(SnapshotError):
    """A file that does not hold a well-formed snapshot; the message names the file and the field."""
