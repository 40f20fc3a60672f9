"""Write one or more files the user named, safely: every file fp8spec writes besides a bundle goes through here
(``schema -o`` and ``--docs``, ``init -o``, ``plan -o``'s pictures, ``--install-completion``'s script and
rc-file line); the bundle writer (fp8spec.compiler.writer) shares its primitives.

What it promises, for each target:
- The data goes to a temporary file beside the target (``.NAME.tmp-<hex>``, created exclusively, never through a
  link), is flushed to disk (fsync), and is renamed over the name in one step: the name holds the old file or
  the whole new one, never a truncated one. A full disk, a file-size limit (``ulimit -f``), an I/O error, Ctrl-C
  or SIGTERM leave the old file as it was and no temporary file behind; a temporary file of a run killed with
  SIGKILL is removed by the next write of that name (it is locked while its run lives).
- A symbolic link at the name is refused, also a dangling one: a link is never followed out of the folder.
- A folder, FIFO, device or socket at the name is refused without opening it, so nothing blocks.
- An existing regular file is replaced only when ``force`` is set, when ``ours`` recognises it as a file fp8spec
  wrote, or when it already holds exactly the new content (then it is left untouched).
- Several files are written together (``write_files``): each is checked and staged completely before any is put
  in place, so a refusal or a write failure leaves every target as it was.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import secrets
import signal
import stat
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from fp8spec.bounded_read import ReadError, read_regular

# What `ours` may read of an existing file to recognise it; far above anything fp8spec writes outside a bundle.
_MAX_EXISTING = 64 * 1024 * 1024
# Leaves room in NAME_MAX (255) for the temporary name's prefix and suffix.
_TMP_STEM = 200


class WriteError(Exception):
    """A file cannot be written where asked; nothing was written or removed. The message is for users."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def not_a_folder(path: Path) -> str:
    """Why an output folder named by -o cannot be used: it exists as something else, or is a dangling link."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"output path {path} is a symbolic link to nothing, not a folder"
    return f"output path {path} exists and is not a folder"


def prepare_folder(path: Path) -> Optional[Path]:
    """Create the output folder ``path`` (and its parents) unless it exists; WriteError naming what is in the
    way when it is not a folder. Returns the topmost folder it created (for remove_created), None if none."""
    top = None
    probe = Path(os.path.abspath(path))
    while not os.path.lexists(probe) and probe != probe.parent:
        top, probe = probe, probe.parent
    try:
        if os.path.lexists(path) and not path.is_dir():
            raise WriteError(not_a_folder(path))
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a parent that is a file, or a dangling link on the way
        raise WriteError(not_a_folder(path)) from None
    except OSError as err:
        raise oserror(path, err) from None
    return top


def remove_created(top: Optional[Path], path: Path) -> None:
    """Remove the folders prepare_folder created for ``path`` (up to ``top``) while they are empty: a failed
    write leaves nothing behind."""
    if top is None:
        return
    folder = Path(os.path.abspath(path))
    while True:
        try:
            os.rmdir(folder)
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent


def oserror(what: Path | str, err: OSError) -> WriteError:
    return WriteError(f"{what}: {err.strerror or err}")


def umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc/self/status, 4.7+)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (fp8spec writes from one thread)
    os.umask(mask)
    return mask


RENAME_NOREPLACE = 1  # linux/fs.h: fail with EEXIST when the new name exists
RENAME_EXCHANGE = 2  # linux/fs.h: swap the two names atomically
_AT_FDCWD = -100  # linux/fcntl.h: paths relative to the working folder


def renameat2(a: Path, b: Path, flags: int) -> bool:
    """``renameat2(a, b, flags)``; False where the C library or the file system has no such call (then nothing
    happened); OSError for any other failure (EEXIST for RENAME_NOREPLACE onto an existing name)."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def write_all(fd: int, data: bytes) -> None:
    """Write every byte and flush it to disk: a short write is continued, a failure (ENOSPC, EFBIG) raised."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable; best effort (some file systems refuse fsync on a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Terminated(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


@contextmanager
def terminations_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise inside the block, so that its cleanup runs; then the process ends by the same
    signal as it would have. A signal the process ignores (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) == signal.SIG_DFL:
            before[s] = signal.signal(s, _raise_terminated)
    try:
        yield
    except _Terminated as err:
        for s, handler in before.items():
            signal.signal(s, handler)
        os.kill(os.getpid(), err.signum)
        raise  # not reached: the default action ends the process
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@dataclass(frozen=True)
class Target:
    """One file to write: ``ours`` says whether existing bytes are a file fp8spec wrote (so it may be replaced
    without ``force``); ``mode`` the permission bits (default 0666 less the umask)."""

    path: Path
    data: bytes
    force: bool = False
    ours: Optional[Callable[[bytes], bool]] = None
    mode: Optional[int] = None
    refused: str = "use --force to replace it"  # what to tell the user about a file it may not replace


@dataclass
class _Staged:
    target: Target
    tmp: Optional[Path]  # None: nothing to put in place (the name already holds this content, or it is done)
    fd: int = -1
    replaces: Optional[int] = None  # the inode it replaces, checked again before the rename
    written: bool = False


def _temporary_name(path: Path) -> tuple[str, re.Pattern]:
    stem = path.name[:_TMP_STEM]
    return f".{stem}.tmp-", re.compile(rf"\.{re.escape(stem)}\.tmp-[0-9a-f]{{16}}")


def _remove_dead_temporaries(path: Path) -> None:
    """Temporary files of runs that were killed (their lock is free) for this name."""
    _, pattern = _temporary_name(path)
    try:
        names = [e.name for e in os.scandir(path.parent) if pattern.fullmatch(e.name)]
    except OSError:
        return
    for name in names:
        leftover = path.parent / name
        try:
            fd = os.open(leftover, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(leftover)
        except OSError:
            continue  # a live run holds it
        finally:
            os.close(fd)


def check(target: Target) -> Optional[os.stat_result]:
    """Refuse what may not be written (WriteError); the existing file's status when it may be replaced, None
    when the name is free. Opens nothing that could block."""
    path = target.path
    if path.name in ("", ".", ".."):
        raise WriteError(f"{path}: not a file name")
    try:
        parent = os.stat(path.parent)
    except OSError as err:
        raise WriteError(f"{path}: cannot write into {path.parent}: {err.strerror or err}") from None
    if not stat.S_ISDIR(parent.st_mode):
        raise WriteError(f"{path}: {path.parent} is not a folder")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:  # a name over NAME_MAX, a path over PATH_MAX, an unsearchable folder
        raise oserror(path, err) from None
    if stat.S_ISLNK(st.st_mode):
        dangling = "" if os.path.exists(path) else " to nothing"
        raise WriteError(f"{path} is a symbolic link{dangling}; refusing to write through it")
    if not stat.S_ISREG(st.st_mode):
        raise WriteError(f"{path} is {_kind(st.st_mode)}; refusing to replace it")
    return st


def _existing(path: Path) -> Optional[bytes]:
    try:
        return read_regular(path, _MAX_EXISTING)
    except ReadError:
        return None


def _stage(target: Target, mask: int) -> _Staged:
    st = check(target)
    if st is not None:
        old = _existing(target.path)
        if old == target.data:
            return _Staged(target, None)
        if not target.force and not (old is not None and target.ours is not None and target.ours(old)):
            raise WriteError(f"{target.path} already exists; {target.refused}")
    path = target.path
    _remove_dead_temporaries(path)
    prefix, _ = _temporary_name(path)
    mode = target.mode if target.mode is not None else 0o666 & ~mask
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = path.parent / f"{prefix}{secrets.token_hex(8)}"
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:
            continue
        except OSError as err:
            raise WriteError(f"{path}: cannot write into {path.parent}: {err.strerror or err}") from None
    staged = _Staged(target, tmp, fd, None if st is None else st.st_ino)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live run's file; cleanup leaves it alone
        os.fchmod(fd, mode)
        write_all(fd, target.data)
    except BaseException:
        _discard(staged)
        raise
    return staged


def _discard(staged: _Staged) -> None:
    if staged.fd >= 0:
        os.close(staged.fd)
        staged.fd = -1
    if staged.tmp is not None:
        try:
            os.unlink(staged.tmp)
        except OSError:
            pass


def _put_in_place(staged: _Staged) -> None:
    path, tmp = staged.target.path, staged.tmp
    assert tmp is not None
    if staged.replaces is None:
        if renameat2(tmp, path, RENAME_NOREPLACE):
            return
        try:  # a hard link fails on an existing name, as RENAME_NOREPLACE does
            os.link(tmp, path, follow_symlinks=False)
        except FileExistsError:
            raise WriteError(f"{path} appeared while fp8spec wrote it; not replaced") from None
        except OSError:  # a file system without hard links
            if os.path.lexists(path):
                raise WriteError(f"{path} appeared while fp8spec wrote it; not replaced") from None
            os.rename(tmp, path)
            return
        os.unlink(tmp)
        return
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        now = None
    if now is None or not stat.S_ISREG(now.st_mode) or now.st_ino != staged.replaces:
        raise WriteError(f"{path} changed while fp8spec wrote it; not replaced")
    os.rename(tmp, path)  # replaces the name itself: a link put there now would be replaced, not followed


def write_files(targets: Sequence[Target]) -> list[bool]:
    """Write every target, or none (WriteError, each target as it was). Returns, per target, whether it was
    written (False: it already held exactly that content)."""
    paths = [os.path.abspath(t.path) for t in targets]
    if len(set(paths)) != len(paths):
        raise WriteError("the same file is named twice: " + ", ".join(str(t.path) for t in targets))
    mask = umask()
    staged: list[_Staged] = []
    current = targets[0].path if targets else Path(".")
    try:
        with terminations_raise():
            try:
                for t in targets:
                    current = t.path
                    check(t)  # every refusal before anything is staged
                for t in targets:
                    current = t.path
                    staged.append(_stage(t, mask))
                for s in staged:
                    current = s.target.path
                    if s.tmp is not None:
                        _put_in_place(s)
                        s.tmp, s.written = None, True
                        fsync_folder(s.target.path.parent)
            finally:
                for s in staged:
                    _discard(s)
    except OSError as err:
        raise oserror(current, err) from None
    return [s.written for s in staged]


def write_file(target: Target) -> bool:
    """Write one target (see write_files)."""
    return write_files([target])[0]
