"""Write a bundle safely: into a temporary folder beside the target, then swap it into place.

Nothing outside the output folder is touched; an existing bundle is replaced only with ``force``, and only when
it is a bundle folder fp8spec wrote and nobody changed (fp8spec.compiler.owned): anything else at that name is
refused, so the writer never deletes what it did not write. A target that would leave the output folder (a
symlink, a name with path parts) is refused.

The replace never leaves the name empty: the new folder and the old bundle are swapped in one step
(``renameat2(RENAME_EXCHANGE)``); where the file system cannot (NFS), the old bundle is parked as
``.NAME.old-<hex>`` and the new one renamed in, and an interrupt between the two puts the old one back. A run
killed in that window leaves the name empty with the old bundle parked: the next compile of that bundle
restores it before anything else.

Concurrent compiles of one bundle: the check "does the bundle exist?" and the rename that puts the new one in
place happen under one lock per bundle (``flock`` on ``.NAME.lock`` in the output folder, removed again
after use), so without ``force`` exactly one of several concurrent compiles wins and the others fail with
a WriteError. Each run's staging folder ``.NAME.tmp-<hex>`` is itself locked while the run lives; the next
run for that bundle removes staging folders whose lock is free (their run was killed) and parked
``.NAME.old-<hex>`` bundles once a bundle is back under the name.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import time
from collections.abc import Collection
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

from fp8spec.compiler.owned import not_ours
from fp8spec.safe_write import RENAME_EXCHANGE, not_a_folder, renameat2, umask, write_all

LOCK_TIMEOUT_S = 30.0  # the lock is held for a mkdir or a rename; waiting this long means a stuck process


class WriteError(Exception):
    """The bundle cannot be written where asked (exit code 2); nothing was written."""


def _oserror(what: Path, err: OSError) -> WriteError:
    return WriteError(f"{what}: {err.strerror or err}")


def bundle_target(out_dir: Path, name: str) -> Path:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise WriteError(f"bundle name {name!r} is not a plain folder name")
    target = out_dir / name
    try:
        if os.path.lexists(out_dir) and not out_dir.is_dir():
            raise WriteError(not_a_folder(out_dir))
        if target.is_symlink():
            raise WriteError(f"{target} is a symbolic link; refusing to write through it")
        root = out_dir.resolve()
        escapes = target.resolve().parent != root
    except OSError as err:  # an unsearchable folder, a name over NAME_MAX, a path over PATH_MAX
        raise _oserror(target, err) from None
    except RuntimeError as err:  # a symbolic link loop on the way (Path.resolve)
        raise WriteError(f"{target}: {err}") from None
    if escapes:
        raise WriteError(f"{target} escapes the output folder {root}")
    return target


def _refuse_existing(target: Path, force: bool, while_running: bool = False) -> None:
    """Refuse a target that exists, unless ``force`` and it is a bundle fp8spec wrote (then it may go)."""
    try:
        if not os.path.lexists(target):
            return
        if force:
            why = not_ours(target)
    except OSError as err:
        raise _oserror(target, err) from None
    if not force:
        extra = " (another compile wrote it while this one ran)" if while_running else ""
        raise WriteError(f"{target} already exists{extra}; use --force to replace it")
    if why:
        raise WriteError(
            f"{target}: not replaced: {why}; --force replaces only a bundle folder fp8spec wrote and nobody "
            "changed (its manifest.json lists every file): move it away, or choose another -o"
        )


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


def _recover(out_dir: Path, name: str) -> Optional[str]:
    """Put back a bundle a killed --force run parked (the name is empty, ``.NAME.old-<hex>`` holds it), then
    remove parked bundles whose replacement is in place and staging folders of dead runs. Called under the
    bundle lock. Returns a note for the user when a bundle was restored."""
    pattern = _leftover(name)
    target = out_dir / name
    found = sorted(e.name for e in os.scandir(out_dir) if pattern.fullmatch(e.name))
    note = None
    parked = [n for n in found if ".old-" in n]
    if parked and not os.path.lexists(target):
        os.rename(out_dir / parked[0], target)
        note = f"restored {target}, which a killed --force compile had set aside as {parked[0]}"
        found.remove(parked[0])
    for entry in found:
        path = out_dir / entry
        if ".old-" in entry:
            # Its replacement is in place. It was checked before it was parked; check again, so that what
            # an older fp8spec parked without checking is never deleted.
            try:
                if not_ours(path) is None:
                    _remove(path)
            except OSError:
                pass
            continue
        if not path.is_dir() or path.is_symlink():
            _remove(path)
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
    return note


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
    out_dir: Path,
    name: str,
    files: dict[str, str],
    force: bool = False,
    executable: Collection[str] = (),
    note: Optional[Callable[[str], None]] = None,
) -> Path:
    """Write ``files`` (relative path -> text) as the folder ``out_dir/name``; those in ``executable`` get the
    executable bit (fp8spec.compiler.bundle.executable says which). WriteError (nothing written, nothing removed)
    when it cannot. ``note`` receives what the user should know (a parked bundle restored)."""
    target = bundle_target(out_dir, name)
    _refuse_existing(target, force)
    for rel in files:
        parts = rel.split("/")
        if any(not p or p.startswith(".") or "\\" in p for p in parts):
            raise WriteError(f"bundle file name {rel!r} is not a plain relative path")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with _bundle_lock(out_dir, name):
            restored = _recover(out_dir, name)
            if restored:
                if note:
                    note(restored)
                _refuse_existing(target, force)  # the restored bundle is what --force must now judge
            staging, staging_fd = _staging_dir(out_dir, name)
    except OSError as err:
        raise WriteError(f"cannot create a bundle in {out_dir}: {err.strerror or err}") from None
    # The user's umask decides who may read the bundle (it can hold addresses, overrides, a reward file):
    # folders and scripts 0777, other files 0666, less the umask, as any tool that writes files does.
    mask = _umask()
    try:
        for rel, text in sorted(files.items()):
            path = staging / rel
            for folder in reversed(path.relative_to(staging).parents[:-1]):
                (staging / folder).mkdir(mode=0o700, exist_ok=True)
                os.chmod(staging / folder, 0o777 & ~mask)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                write_all(fd, text.encode("utf-8"))
            finally:
                os.close(fd)
            os.chmod(path, (0o777 if rel in executable else 0o666) & ~mask)
        os.chmod(staging, 0o777 & ~mask)
        with _bundle_lock(out_dir, name):
            _refuse_existing(bundle_target(out_dir, name), force, while_running=True)
            _put_in_place(staging, target)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError(f"cannot write {target}: {err.strerror or err}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        os.close(staging_fd)
    return target


_umask = umask


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step; False where the C library or file system has no such call."""
    return renameat2(a, b, RENAME_EXCHANGE)


def _put_in_place(staging: Path, target: Path) -> None:
    """The replace, under the bundle lock, after _refuse_existing allowed it: the name is never empty
    (an atomic swap), or, where the file system cannot swap, empty only between two renames, and an interrupt
    there puts the old bundle back (a kill leaves it parked for the next compile to restore)."""
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the old bundle
        return
    old = _unique(target.parent, target.name, "old")
    try:
        os.rename(target, old)
        os.rename(staging, target)
    except BaseException:
        if os.path.lexists(old) and not os.path.lexists(target):
            os.rename(old, target)  # put the previous bundle back (also on Ctrl-C)
        raise
    shutil.rmtree(old, ignore_errors=True)
