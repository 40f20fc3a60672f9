"""What the compiler knows about the fp8spec runtime patch set, read from its manifest (plain data, no torch)."""

from __future__ import annotations

from typing import Any


def manifest() -> Any:
    from fp8spec.runtime import manifest as runtime_manifest

    return runtime_manifest


def patch_info(name: str) -> dict:
    return dict(manifest().PATCHES[name])


def patch_supports(name: str, engine: str, version: str) -> tuple[bool, list[str]]:
    """Whether patch ``name`` knows ``engine`` at ``version``; also returns the versions it knows."""
    try:
        info = patch_info(name)
    except (ImportError, KeyError, AttributeError):
        return False, []
    engines = info.get("engines") or {}
    versions = [str(v) for v in engines.get(engine, ())]
    return version in versions, versions


def patch_attention(name: str) -> tuple[str, ...]:
    """Attention kinds (catalog ModelFacts.attention values) patch ``name`` hooks; empty if it says none."""
    try:
        return tuple(patch_info(name).get("attention") or ())
    except (ImportError, KeyError, AttributeError):
        return ()
