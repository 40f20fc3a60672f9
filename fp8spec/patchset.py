"""What the compiler knows about the fp8spec runtime patch set, read from its manifest (plain data, no torch)."""

from __future__ import annotations

import hashlib
from pathlib import Path
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


# --- the copy of the patch set a bundle ships -------------------------------------------------------------
# The bundle carries fp8spec/__init__.py (import-light) and every .py file of fp8spec/runtime under
# lib/, delivered to the workers as a Ray py_modules entry (lib/fp8spec) and put on PYTHONPATH by launch.sh.
# Nothing is installed on the nodes; the preflight checks the file set the workers import against
# FILESET_DIGEST below, computed the same way there (fp8spec/preflight/preflight.py, runtime_fileset).
BUNDLE_LIB = "lib"
PACKAGE = "fp8spec"


def shipped_files() -> dict[str, str]:
    """Path relative to lib/ -> text of every file of the shipped patch set, sorted."""
    package = Path(__file__).resolve().parent
    paths = [package / "__init__.py"] + sorted(
        p for p in (package / "runtime").rglob("*.py") if "__pycache__" not in p.parts
    )
    return {f"{PACKAGE}/{p.relative_to(package).as_posix()}": p.read_text(encoding="utf-8") for p in paths}


def fileset_digest(sha_by_path: dict[str, str]) -> str:
    """One sha256 for a file set: over 'sha256  path' lines, sorted by path (sha256sum's format)."""
    lines = "".join(f"{sha}  {path}\n" for path, sha in sorted(sha_by_path.items()))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def shipped_fileset() -> dict:
    """What the manifest and preflight.json record about the shipped copy."""
    files = {path: hashlib.sha256(text.encode("utf-8")).hexdigest() for path, text in shipped_files().items()}
    return {
        "package": PACKAGE,
        "py_module": f"{BUNDLE_LIB}/{PACKAGE}",
        "files": files,
        "sha256": fileset_digest(files),
    }
