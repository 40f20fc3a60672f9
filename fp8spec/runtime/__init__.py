"""fp8spec runtime patch set: FP8 weight sync and per-step KV-scale calibration for verl + vLLM/SGLang.

Importing this package does nothing unless ``FP8SPEC_RUNTIME_PATCHES`` names patches (comma list,
see ``manifest.PATCHES``). Then it checks the installed verl version and registers import hooks that
patch verl / engine modules when (and only in the processes where) they are imported: the hooks of ``hooks.HOOKS``,
one table saying which patch turns each on, what it wraps, in which process and in which order. Needs torch
(and triton for the fast path) and nothing else; never imports fp8spec modules outside this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fp8spec.runtime.envs import RUNTIME_PATCHES, check_environment
from fp8spec.runtime.hooks import Hook, for_patches
from fp8spec.runtime.manifest import PATCHES, PATCHSET_NAME, PATCHSET_VERSION

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType

__version__ = PATCHSET_VERSION
__all__ = ["PATCHSET_NAME", "PATCHSET_VERSION", "activate", "active_patches", "requested_patches"]

_ACTIVE: set = set()


def requested_patches(value: str | None = None) -> list[str]:
    """Parse a patch list (default: the ``FP8SPEC_RUNTIME_PATCHES`` environment variable)."""
    names = RUNTIME_PATCHES.read() if value is None else RUNTIME_PATCHES.read({RUNTIME_PATCHES.name: value})
    unknown = [p for p in names if p not in PATCHES]
    if unknown:
        raise ValueError(f"{RUNTIME_PATCHES.name}: unknown patch(es) {unknown}; known: {sorted(PATCHES)}")
    return names


def active_patches() -> frozenset:
    return frozenset(_ACTIVE)


class _Installer:
    """The callback a hook registers: the version checks, then its installer, imported now."""

    def __init__(self, hook: Hook):
        self.hook = hook

    def __call__(self, module: ModuleType) -> None:
        from fp8spec.runtime import version_guard

        for dist in self.hook.requires:
            version_guard.require(dist, self.hook.label)
        path, name = self.hook.installer.rsplit(".", 1)
        getattr(importlib.import_module(path), name)(module)

    def __repr__(self) -> str:
        return f"<installer {self.hook.installer} on {self.hook.target}>"


def activate(patches: Iterable[str] | None = None) -> frozenset:
    """Install the requested patches' import hooks (idempotent). Returns the active set."""
    names = requested_patches() if patches is None else requested_patches(",".join(patches))
    new = [p for p in names if p not in _ACTIVE]
    if not new:
        return active_patches()
    from fp8spec.runtime import _importhook, log, version_guard

    check_environment(set(new))  # a malformed knob fails here, in every worker, naming the variable
    log.install()

    if version_guard.installed_version("verl") is not None:
        version_guard.require("verl", ",".join(new))
    _ACTIVE.update(new)
    for hook in for_patches(
        set(new)
    ):  # a hook of two patches activated one by one runs twice: installers are idempotent
        _importhook.when_imported(hook.target, _Installer(hook))
    return active_patches()


if RUNTIME_PATCHES.read():
    activate()
