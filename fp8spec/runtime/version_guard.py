"""Refuse to patch a backend version the patch set was not written against.

Each engine/verl patch calls ``require(dist)`` before touching anything. The check reads the
installed distribution's version from its metadata (no import of the package) and compares it with
``manifest.KNOWN_VERSIONS`` (exact release match; a local suffix such as ``+cu130`` is ignored).
On a mismatch it raises ``UnsupportedVersionError`` with a one-line message, unless
``FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS=1`` is set.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from fp8spec.runtime.envs import ALLOW_UNKNOWN_VERSIONS
from fp8spec.runtime.manifest import KNOWN_VERSIONS, PATCHSET_NAME, PATCHSET_VERSION

if TYPE_CHECKING:
    from collections.abc import Iterable


class UnsupportedVersionError(RuntimeError):
    pass


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _norm(v: str) -> str:
    return v.split("+", 1)[0].strip()


def check(dist: str, version: str | None, patch: str = "", known: Iterable[str] | None = None) -> None:
    """Raise UnsupportedVersionError unless ``version`` of ``dist`` is one the patch set knows."""
    known = tuple(known if known is not None else KNOWN_VERSIONS.get(dist, ()))
    what = f"{PATCHSET_NAME} {PATCHSET_VERSION}" + (f" patch '{patch}'" if patch else "")
    if version is None:
        raise UnsupportedVersionError(f"{what}: {dist} is not installed in this process; cannot patch it.")
    if _norm(version) in known:
        return
    if ALLOW_UNKNOWN_VERSIONS.read():
        return
    raise UnsupportedVersionError(
        f"{what} supports {dist} {', '.join(known) or '(none)'} but {version} is installed; "
        f"refusing to patch (set {ALLOW_UNKNOWN_VERSIONS.name}=1 to override)."
    )


def require(dist: str, patch: str = "") -> str | None:
    """Check the installed ``dist`` and return its version (None: not installed, and unknown versions allowed)."""
    v = installed_version(dist)
    check(dist, v, patch)
    return v
