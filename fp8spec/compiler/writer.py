"""Write a bundle safely: into a temporary folder beside the target, then rename it into place.

Nothing outside the output folder is touched; an existing bundle is replaced only with ``force``; a
target that would leave the output folder (a symlink, a name with path parts) is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from fp8spec.compiler.bundle import EXECUTABLE


class WriteError(Exception):
    """The bundle cannot be written where asked (exit code 2); nothing was written."""


def bundle_target(out_dir: Path, name: str) -> Path:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise WriteError(f"bundle name {name!r} is not a plain folder name")
    if out_dir.exists() and not out_dir.is_dir():
        raise WriteError(f"output path {out_dir} exists and is not a folder")
    target = out_dir / name
    if target.is_symlink():
        raise WriteError(f"{target} is a symbolic link; refusing to write through it")
    root = out_dir.resolve()
    if target.resolve().parent != root:
        raise WriteError(f"{target} escapes the output folder {root}")
    return target


def write_bundle(out_dir: Path, name: str, files: dict[str, str], force: bool = False) -> Path:
    target = bundle_target(out_dir, name)
    if target.exists() and not force:
        raise WriteError(f"{target} already exists; use --force to replace it")
    for rel in files:
        parts = rel.split("/")
        if any(not p or p.startswith(".") or "\\" in p for p in parts):
            raise WriteError(f"bundle file name {rel!r} is not a plain relative path")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out_dir))
    except OSError as err:
        raise WriteError(f"cannot create {out_dir}: {err.strerror or err}") from None
    try:
        for rel, text in sorted(files.items()):
            path = staging / rel
            for folder in reversed(path.relative_to(staging).parents[:-1]):
                (staging / folder).mkdir(mode=0o755, exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            os.chmod(path, 0o755 if rel in EXECUTABLE else 0o644)
        os.chmod(staging, 0o755)
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=out_dir))
            os.rmdir(old)
            os.rename(target, old)
        os.rename(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError(f"cannot write {target}: {err.strerror or err}") from None
    return target
