"""One reading of the paths a spec, a draft or a command line names, for every guard that judges one.

A guard must judge the path its user will see: ``~user`` expanded as the shell would (or refused, located,
when this machine knows no such user: pathlib raises RuntimeError there), a relative path taken from the
folder it is relative to, and ``..`` and symbolic links resolved as ``cd DIR && pwd -P`` resolves them.
Lexical ``normpath`` is not that: ``../../..`` stays ``../../..`` however deep it climbs, and ``//dev/shm``
keeps its two slashes.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path


class PathError(ValueError):
    """A path that cannot be read as its user means it; the message says why, without the field's name."""


def expand_user(value: str) -> str:
    """``~/x`` and ``~user/x`` as the shell expands them; PathError when there is no such home folder."""
    if not value.startswith("~"):
        return value
    expanded = os.path.expanduser(value)
    if expanded.startswith("~"):  # expanduser leaves what it cannot expand as it is
        user = value[1:].split("/", 1)[0]
        if user:
            why = f"this machine has no user {user!r}"
        else:
            why = "neither $HOME nor the user database names a home folder"
        raise PathError(f"{value!r} starts with {'~' + user!r}, but {why}; write the folder out")
    return expanded


def local_path(value: str, base: str | os.PathLike[str]) -> Path:
    """The path ``value`` names on this machine, relative ones taken from ``base`` (not resolved)."""
    path = Path(expand_user(value))
    return path if path.is_absolute() else Path(base) / path


def resolved(value: str, base: str | os.PathLike[str]) -> Path:
    """The folder ``cd BASE && cd VALUE && pwd -P`` would print (``..`` above ``/`` is ``/``)."""
    return Path(os.path.realpath(local_path(value, base)))


def lexical(path: str) -> str:
    """An absolute POSIX path without ``.``, ``..``, repeated or trailing slashes, for comparing paths
    that exist only elsewhere (in a pod): ``//dev/shm/`` and ``/dev/./shm`` are ``/dev/shm``."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("/") else normal


def is_root(path: str | os.PathLike[str]) -> bool:
    return lexical(os.fspath(path)) == "/"
