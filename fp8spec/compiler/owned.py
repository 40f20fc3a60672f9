"""What ``compile --force`` may replace: a bundle folder fp8spec wrote and nobody changed since, nothing else.

The proof is the folder's own ``manifest.json`` (fp8spec.compiler.bundle writes it last, with the sha256 of
every other file): a folder qualifies when its manifest is fp8spec's and every file in it is one the manifest
lists, with the content it lists. A user's folder or file that happens to have the bundle's name, the spec's
own support folder (``rewards/``), a bundle with a Slurm log or notes added, or an edited ``launch.sh`` are all
refused, so ``--force`` can never delete anything fp8spec did not write. Python's ``__pycache__`` files (made
when a bundle's own modules are imported) are the one addition allowed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Optional

from fp8spec.bounded_read import ReadError, read_regular

MANIFEST = "manifest.json"
_MAX_FILE = 256 * 1024 * 1024  # far above any bundle file; a bound, so no file can make the check run away
_MAX_ENTRIES = 100_000  # a bundle has a few dozen files; past this it is not one of ours


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a folder"


def _listed_files(folder: Path) -> tuple[Optional[dict[str, str]], str]:
    """The manifest's file -> sha256 table, or (None, why it is not an fp8spec manifest)."""
    path = folder / MANIFEST
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None, f"it has no {MANIFEST}, so fp8spec did not write it"
    except OSError as err:
        return None, f"its {MANIFEST} cannot be read: {err.strerror or err}"
    if not stat.S_ISREG(mode):
        return None, f"its {MANIFEST} is {_kind(mode)}, not one fp8spec writes"
    try:
        data = json.loads(read_regular(path, _MAX_FILE, MANIFEST).decode("utf-8"))
    except (ReadError, UnicodeDecodeError, ValueError, RecursionError):
        return None, f"its {MANIFEST} is not one fp8spec writes"
    files = data.get("files") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("fp8spec_version"), str)
        or not isinstance(files, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    ):
        return None, f"its {MANIFEST} is not one fp8spec writes"
    return files, ""


def _sha256(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(read_regular(path, _MAX_FILE)).hexdigest()
    except ReadError:
        return None


def not_ours(target: Path) -> Optional[str]:
    """Why ``target`` is not a bundle folder fp8spec wrote and nobody changed; None when it is one.
    OSError (a folder that cannot be listed) propagates to the caller."""
    mode = os.lstat(target).st_mode
    if not stat.S_ISDIR(mode):
        return f"it is {_kind(mode)}, not a bundle folder"
    listed, why = _listed_files(target)
    if listed is None:
        return why
    folders = {"/".join(k.split("/")[:i]) + "/" for k in listed for i in range(1, k.count("/") + 1)}
    seen = 0
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(target / rel_dir) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            seen += 1
            if seen > _MAX_ENTRIES:
                return f"it holds more than {_MAX_ENTRIES} entries; a bundle has a few dozen"
            rel = f"{rel_dir}{entry.name}"
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                if rel + "/" not in folders and entry.name != "__pycache__":
                    return f"it holds the folder {rel}/, which fp8spec did not write"
                stack.append(rel + "/")
                continue
            if rel == MANIFEST:
                continue
            if not stat.S_ISREG(mode):
                return f"{rel} is {_kind(mode)}, which fp8spec never writes"
            if rel_dir.endswith("__pycache__/") and entry.name.endswith(".pyc"):
                continue  # Python's byte-code cache of the bundle's own modules
            want = listed.get(rel)
            if want is None:
                return f"it holds {rel}, which fp8spec did not write"
            if _sha256(target / rel) != want:
                return f"{rel} was changed after fp8spec wrote it"
    return None
