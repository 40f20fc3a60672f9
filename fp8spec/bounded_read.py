"""Read a user-named file safely: a regular file only, at most ``limit`` bytes, never waiting.

A file's size is never trusted (/proc files claim 0 bytes, /dev/zero has no end): the file is opened with
O_NONBLOCK (a FIFO without a writer does not block the open, an odd file fails instead of blocking a read),
its type checked on the open descriptor, and at most limit + 1 bytes are read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class ReadError(Exception):
    """The file cannot be read as a regular file within the limit; the message says why, for users."""


_KINDS = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISFIFO, "is a named pipe (FIFO), not a regular file"),
    (stat.S_ISCHR, "is a character device (like /dev/zero), not a regular file"),
    (stat.S_ISBLK, "is a block device, not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
)


def _open_error(path: Path, err: OSError, what: str) -> str:
    if err.errno == errno.ENOENT:
        missing = " (a symbolic link to a missing file)" if path.is_symlink() else ""
        return f"{what} not found{missing}"
    if err.errno == errno.ELOOP:
        return "symbolic link loop: the path never reaches a file"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: the {what} cannot be read"
    if err.errno == errno.ENXIO:
        return "is a socket or device without a reader, not a regular file"
    return f"cannot read {what}: {err.strerror or err}"


def read_regular(path: Path, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ReadError (with a user message) otherwise."""
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
    except OSError as err:
        raise ReadError(_open_error(Path(path), err, what)) from None
    except ValueError:  # an embedded NUL in the path
        raise ReadError("the file name contains a NUL character") from None
    try:
        mode = os.fstat(fd).st_mode
        for is_kind, message in _KINDS:
            if is_kind(mode):
                raise ReadError(message)
        if not stat.S_ISREG(mode):
            raise ReadError("is not a regular file")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, limit + 1 - total)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise ReadError(f"{what} is larger than the limit of {limit} bytes")
    except OSError as err:
        raise ReadError(f"cannot read {what}: {err.strerror or err}") from None
    finally:
        os.close(fd)
