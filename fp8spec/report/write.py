"""The one place the report writes files (its pictures): into a folder, through a temporary file and
os.replace, so a reader never sees half a file; a symbolic link where a file or the folder would be is refused
(it could point anywhere). Kept to one function so a general safe writer can replace it in one place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class WriteError(Exception):
    """The file cannot be written; the message names it and says why."""


def write_file(folder: Path, name: str, data: bytes) -> Path:
    target = folder / name
    try:
        if folder.is_symlink():
            raise WriteError(f"{folder}: refusing to write through a symbolic link")
        folder.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            raise WriteError(f"{target}: refusing to replace a symbolic link")
        if target.exists() and not target.is_file():
            raise WriteError(f"{target}: exists and is not a regular file")
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            umask = os.umask(0)  # mkstemp makes the file private; a picture gets the usual permissions
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise WriteError(f"{target}: cannot write: {err.strerror or err}") from None
    return target
