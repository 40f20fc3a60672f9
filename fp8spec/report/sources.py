"""What a run left, as named texts: a log file, a folder of logs (a live run's, Ray's worker logs), or an archive
(.tgz, .tar.gz, .tar, .zip) read in memory.

Nothing is extracted to disk. Each file is read within a size limit; archive members that are not regular
files, or whose names are absolute or climb out with '..', are skipped and said so; a file that cannot be read
becomes a located problem, never an exception. Only an unreadable RUN itself raises SourceError.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Optional
from zlib import error as zlib_error

from fp8spec.bounded_read import ReadError, read_regular

FILE_LIMIT = 256 << 20  # one log: a multi-day driver log stays below this
TOTAL_LIMIT = 1 << 30  # all logs of one run together
MAX_FILES = 20_000
# What a run writes that holds lines the report reads: driver/console logs, Ray's worker-*.out/.err, raylet.out.
LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
# Ray's own bookkeeping logs: large, and never hold a line the report reads.
SKIPPED_PREFIXES = (
    "python-core-",
    "gcs_server",
    "dashboard",
    "monitor",
    "runtime_env",
    "log_monitor",
    "events",
)
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar", ".zip")


class SourceError(Exception):
    """RUN cannot be read at all (missing, a device, an archive that is not one); the message is for users."""


@dataclass
class Sources:
    texts: list[tuple[str, str]] = field(default_factory=list)  # (display name, text), in name order
    problems: list[tuple[str, str]] = field(default_factory=list)  # (where, what could not be read)


def read_run(path: Path) -> Sources:
    display = str(path)
    if path.is_dir():
        return _read_folder(path)
    if path.name.lower().endswith(ARCHIVE_SUFFIXES):
        data = _read(path, display, FILE_LIMIT * 4)
        return _read_archive(data, display)
    data = _read(path, display, FILE_LIMIT)
    out = Sources()
    out.texts.append((display, _decode(data)))
    return out


def _read(path: Path, display: str, limit: int) -> bytes:
    try:
        return read_regular(path, limit, "run log")
    except ReadError as err:
        raise SourceError(f"{display}: {err}") from None


def _decode(data: bytes) -> str:
    # Logs mix encodings and cut multi-byte characters at truncation; a bad byte must not hide the rest.
    return data.decode("utf-8", errors="replace")


def _wanted(name: str) -> bool:
    base = PurePosixPath(name).name
    return base.lower().endswith(LOG_SUFFIXES) and not base.startswith(SKIPPED_PREFIXES)


def _read_folder(root: Path) -> Sources:
    out = Sources()
    names: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            names.append(Path(dirpath) / name)
    total = 0
    for path in names:
        rel = path.relative_to(root).as_posix()
        if not _wanted(rel):
            continue
        display = f"{root}/{rel}" if str(root) != "." else rel
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                out.problems.append((display, "skipped: a symbolic link (only regular files are read)"))
                continue
            data = read_regular(path, FILE_LIMIT, "log")
        except (ReadError, OSError) as err:
            out.problems.append((display, f"cannot read: {err}"))
            continue
        total += len(data)
        if total > TOTAL_LIMIT or len(out.texts) >= MAX_FILES:
            out.problems.append((display, f"not read: the run's logs exceed {TOTAL_LIMIT >> 20} MiB in all"))
            break
        out.texts.append((display, _decode(data)))
    if not out.texts and not out.problems:
        raise SourceError(f"{root}: no log files (*.log, *.out, *.err, *.txt) in this folder")
    return out


def _safe_name(name: str) -> Optional[str]:
    """Why an archive member's name is refused, or None when it stays inside the archive's folder."""
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in p.parts:
        return "a path with '..'"
    return None


def _read_archive(data: bytes, display: str) -> Sources:
    if data[:4] == b"PK\x03\x04" or display.lower().endswith(".zip"):
        return _read_zip(data, display)
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except (tarfile.TarError, EOFError, OSError) as err:
        raise SourceError(f"{display}: not a readable tar archive ({err})") from None
    out = Sources()
    total = 0
    with tar:
        members: list[tarfile.TarInfo] = []
        try:
            while (member_info := tar.next()) is not None:
                members.append(member_info)
        except (tarfile.TarError, EOFError, OSError, zlib_error) as err:  # cut short: read what was listed
            out.problems.append((display, f"the archive is cut short or damaged ({err})"))
        for m in sorted(members, key=lambda m: m.name):
            where = f"{display}:{m.name}"
            if not _wanted(m.name):
                continue
            why = _safe_name(m.name) or (None if m.isfile() else "not a regular file (a link or device)")
            if why:
                out.problems.append((where, f"skipped: {why}"))
                continue
            if m.size > FILE_LIMIT or total + m.size > TOTAL_LIMIT:
                out.problems.append((where, f"skipped: larger than the limit of {FILE_LIMIT >> 20} MiB"))
                continue
            try:
                fh = tar.extractfile(m)
                member = _bounded(fh, FILE_LIMIT) if fh is not None else None
            except (tarfile.TarError, EOFError, OSError) as err:
                out.problems.append((where, f"cannot read: {err}"))
                continue
            if member is None:
                out.problems.append((where, "cannot read this member"))
                continue
            total += len(member)
            out.texts.append((where, _decode(member)))
    return out


def _bounded(fh: IO[bytes], limit: int) -> Optional[bytes]:
    data = fh.read(limit + 1)
    return None if len(data) > limit else data


def _read_zip(data: bytes, display: str) -> Sources:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise SourceError(f"{display}: not a readable zip archive ({err})") from None
    out = Sources()
    total = 0
    with zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            where = f"{display}:{info.filename}"
            if info.is_dir() or not _wanted(info.filename):
                continue
            mode = info.external_attr >> 16
            # Unix zips keep the file type in the high bits; a link's content is its target path, not a log.
            why = _safe_name(info.filename) or ("a symbolic link" if stat.S_ISLNK(mode) else None)
            if why:
                out.problems.append((where, f"skipped: {why}"))
                continue
            try:
                with zf.open(info) as fh:  # the declared size can lie: read at most the limit
                    member = _bounded(fh, min(FILE_LIMIT, TOTAL_LIMIT - total))
            except (zipfile.BadZipFile, OSError, RuntimeError, ValueError, EOFError) as err:
                out.problems.append((where, f"cannot read: {err}"))
                continue
            if member is None:
                out.problems.append((where, f"skipped: larger than the limit of {FILE_LIMIT >> 20} MiB"))
                continue
            total += len(member)
            out.texts.append((where, _decode(member)))
    return out
