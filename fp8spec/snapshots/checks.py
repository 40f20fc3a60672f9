"""Is a file a well-formed snapshot? Every field is checked before any of it is used.

A snapshot is data that anyone can hand to ``fp8spec backends verify``: its ``artifact`` fields name a file
to hash and a release to download, so they are held to strict patterns (a normalized package name that has
an extractor, a normalized PEP 440 version, a wheel file name of that release, a sha256), and the recorded
``pip_download`` text must be, word for word, a command fp8spec itself writes for that release. pip's
arguments are then rebuilt from fp8spec's own settings (:class:`fp8spec.snapshots.artifacts.PipRequest`);
the text is never split into arguments.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from . import artifacts as _art
from .packages import PACKAGES, SnapshotFormatError

# A wheel file name (PEP 427): name-version[-build]-python-abi-platform.whl, ASCII word characters only,
# so it cannot hold a folder, '..' or an option.
_WHEEL = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[A-Za-z0-9.+!_]+)"
    r"(?:-[0-9][A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl"
)
_KEYS = ("format", "package", "version", "artifact", "extractor", "data")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _field(raw: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in raw:
        raise ValueError(f"{where}{key}: missing")
    value = raw[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}{key}: expected {kind.__name__}, got {_type_name(value)} {_short(value)}")
    return value


def allowed_records(package: str, version: str) -> dict[str, str]:
    """The ``pip_download`` texts fp8spec writes for ``package==version``, by the Python version chosen."""
    info = PACKAGES[package]
    return {v: info.request(version, v).record() for v in info.python_versions}


def _check(raw: Any) -> str:
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object, got {_type_name(raw)}")
    for key in _KEYS:
        if key not in raw:
            raise ValueError(f"{key}: missing")
    _field(raw, "format", int, "")
    package = _field(raw, "package", str, "")
    try:
        _art.check_name(package)
    except ValueError as err:
        raise ValueError(f"package: {err}") from None
    if package not in PACKAGES:
        raise ValueError(
            f"package: no snapshot extractor for {package!r}; known: {', '.join(sorted(PACKAGES))}"
        )
    version = _field(raw, "version", str, "")
    try:
        _art.check_version(version)
    except ValueError as err:
        raise ValueError(f"version: {err}") from None
    extractor = _field(raw, "extractor", dict, "")
    _field(extractor, "module", str, "extractor.")
    _field(extractor, "version", int, "extractor.")
    _field(raw, "data", dict, "")
    art = _field(raw, "artifact", dict, "")
    filename = _field(art, "filename", str, "artifact.")
    m = _WHEEL.fullmatch(filename)
    if not m or _art.normalize_name(m.group("name")) != package or m.group("version") != version:
        raise ValueError(
            f"artifact.filename: expected a wheel file name of {package}=={version} "
            f"({package.replace('-', '_')}-{version}-...whl), got {_short(filename)}"
        )
    try:
        _art.check_sha256(_field(art, "sha256", str, "artifact."))
    except ValueError as err:
        raise ValueError(f"artifact.sha256: {err}") from None
    size = _field(art, "size", int, "artifact.")
    if size < 0:
        raise ValueError(f"artifact.size: expected a size in bytes, got {size}")
    record = _field(art, "pip_download", str, "artifact.")
    for python_version, allowed in allowed_records(package, version).items():
        if record == allowed:
            return python_version
    expected = " or ".join(repr(r) for r in allowed_records(package, version).values())
    raise ValueError(
        f"artifact.pip_download: {_short(record)} is not a command fp8spec writes for {package}=={version} "
        f"(expected {expected}); the recorded command is never run, and a snapshot cannot add pip options"
    )


def check_snapshot(raw: Any, where: str = "snapshot") -> str:
    """Check a parsed snapshot; return the Python version its wheel was chosen for.

    Raises :class:`SnapshotFormatError` (``"WHERE: FIELD: why"``) on the first field that does not check."""
    try:
        return _check(raw)
    except ValueError as err:
        raise SnapshotFormatError(f"{where}: {err}") from None


class _LongNumber(ValueError):
    pass


def _bounded_int(digits: str) -> int:
    # Python refuses to convert more than 4300 digits (and says to raise its limit); no snapshot holds such a number
    if len(digits.lstrip("-")) > 100:
        raise _LongNumber(f"a number with {len(digits.lstrip('-'))} digits")
    return int(digits)


def read_checked(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check the snapshot at ``path``; OSError when it cannot be read, SnapshotFormatError when
    it is not a well-formed snapshot."""
    where = os.fsdecode(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = json.loads(data.decode("utf-8"), parse_int=_bounded_int)
    except _LongNumber as err:
        raise SnapshotFormatError(f"{where}: not a snapshot: {err}") from None
    except UnicodeDecodeError as err:
        raise SnapshotFormatError(f"{where}: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise SnapshotFormatError(f"{where}:{err.lineno}:{err.colno}: not JSON: {err.msg}") from None
    except RecursionError:
        raise SnapshotFormatError(f"{where}: not JSON: nested too deeply") from None
    check_snapshot(raw, where)
    return raw
