"""Write a bundle safely: into a temporary folder beside the target, then rename it into place.

Nothing outside the output folder is touched; an existing bundle is replaced only with ``force``; a
target that would leave the output folder (a symlink, a name with path parts) is refused.

Concurrent compiles of one bundle: the check "does the bundle exist?" and the rename that puts the new one in
place happen under one lock per bundle (``flock`` on ``.NAME.lock`` in the output folder, removed again
after use), so without ``force`` exactly one of several concurrent compiles wins and the others fail with
a WriteError. Each run's staging folder ``.NAME.tmp-<hex>`` is itself locked while the run lives; the next
run for that bundle removes staging folders whose lock is free (their run was killed) and ``.NAME.old-<hex>``
folders (a killed run's previous bundle, set aside to be deleted).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Collection
from contextlib import contextmanager
from pathlib import Path

LOCK_TIMEOUT_S = 30.0  # the lock is held for a mkdir or a rename; waiting this long means a stuck process


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


def _leftover(name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(name)}\.(tmp|old)-[0-9a-f]{{16}}")


def _unique(out_dir: Path, name: str, kind: str) -> Path:
    return out_dir / f".{name}.{kind}-{secrets.token_hex(8)}"


@contextmanager
def _bundle_lock(out_dir: Path, name: str):
    """Exclusive lock for one bundle name across processes; the lock file is gone again afterwards."""
    path = out_dir / f".{name}.lock"
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise WriteError(
                            f"another fp8spec compile holds the lock {path} for more than "
                            f"{LOCK_TIMEOUT_S:.0f} s; is it stuck?"
                        ) from None
                    time.sleep(0.01)
            # The holder before us may have removed the file: then this lock guards nothing; take a fresh one.
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        try:
            os.unlink(path)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _clean_leftovers(out_dir: Path, name: str) -> None:
    """Remove what killed runs left for this bundle. Called under the bundle lock."""
    pattern = _leftover(name)
    for entry in os.scandir(out_dir):
        match = pattern.fullmatch(entry.name)
        if not match:
            continue
        path = out_dir / entry.name
        if match.group(1) == "old" or not entry.is_dir(follow_symlinks=False):
            _remove(path)  # set aside by a run that held this lock: that run is over
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live run is writing it
        finally:
            os.close(fd)
        _remove(path)


def _staging_dir(out_dir: Path, name: str) -> tuple[Path, int]:
    """A new, locked staging folder (created under the bundle lock, so no cleanup sees it unlocked)."""
    while True:
        path = _unique(out_dir, name, "tmp")
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def write_bundle(
    out_dir: Path, name: str, files: dict[str, str], force: bool = False, executable: Collection[str] = ()
) -> Path:
    """Write ``files`` (relative path -> text) as the bundle ``name`` in ``out_dir``; those in ``executable`` get the
    executable bit (fp8spec.compiler.bundle.executable says which)."""
    target = bundle_target(out_dir, name)
    if os.path.lexists(target) and not force:
        raise WriteError(f"{target} already exists; use --force to replace it")
    for rel in files:
        parts = rel.split("/")
        if any(not p or p.startswith(".") or "\\" in p for p in parts):
            raise WriteError(f"bundle file name {rel!r} is not a plain relative path")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with _bundle_lock(out_dir, name):
            _clean_leftovers(out_dir, name)
            staging, staging_fd = _staging_dir(out_dir, name)
    except OSError as err:
        raise WriteError(f"cannot create a bundle in {out_dir}: {err.strerror or err}") from None
    try:
        for rel, text in sorted(files.items()):
            path = staging / rel
            for folder in reversed(path.relative_to(staging).parents[:-1]):
                (staging / folder).mkdir(mode=0o755, exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            os.chmod(path, 0o755 if rel in executable else 0o644)
        os.chmod(staging, 0o755)
        with _bundle_lock(out_dir, name):
            _put_in_place(staging, bundle_target(out_dir, name), force)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError(f"cannot write {target}: {err.strerror or err}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        os.close(staging_fd)
    return target


def _put_in_place(staging: Path, target: Path, force: bool) -> None:
    """The checked replace, under the bundle lock: nothing appears at ``target`` between check and rename."""
    old = None
    if os.path.lexists(target):
        if not force:
            raise WriteError(
                f"{target} already exists (another compile wrote it while this one ran); "
                "use --force to replace it"
            )
        kind = stat.S_IFMT(os.lstat(target).st_mode)
        old = _unique(target.parent, target.name, "old")
        os.rename(target, old)
        if kind != stat.S_IFDIR:
            os.unlink(old)  # --force over a file: it goes now, there is nothing to restore
            old = None
    try:
        os.rename(staging, target)
    except OSError:
        if old is not None:
            os.rename(old, target)  # put the previous bundle back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
