"""Downloading released artifacts through pip into a cache, hashing them, and reading members.

The cache is ``$FP8SPEC_CACHE/wheels`` (default ``~/.cache/fp8spec/wheels``). A file already in the
cache whose sha256 matches the one a snapshot records is used without any network access.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from . import _ast

if TYPE_CHECKING:
    import ast


class ArtifactError(RuntimeError):
    """The artifact could not be downloaded, found or read."""


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The fp8spec cache folder (``cache_dir``, else ``$FP8SPEC_CACHE``, else ``~/.cache/fp8spec``)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("FP8SPEC_CACHE")
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/fp8spec").expanduser()


def wheel_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    path = cache_root(cache_dir) / "wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def normalize_name(name: str) -> str:
    """PEP 503 name: lower case, runs of ``-_.`` become ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_spec(spec: str) -> tuple[str, str]:
    """``"vllm==0.33.0"`` -> ``("vllm", "0.33.0")``. Only exact pins are accepted."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*", spec)
    if not m:
        raise ValueError(f"expected an exact pin such as 'vllm==0.33.0', got {spec!r}")
    return normalize_name(m.group(1)), m.group(2)


def _wheel_prefix(name: str, version: str) -> str:
    return f"{normalize_name(name).replace('-', '_')}-{version}-"


def find_cached(name: str, version: str, cache: Path, *, filename: str | None = None) -> list[Path]:
    if filename:
        p = cache / filename
        return [p] if p.is_file() else []
    prefix = _wheel_prefix(name, version)
    return sorted(p for p in cache.iterdir() if p.is_file() and p.name.lower().startswith(prefix.lower()))


# Every word pip sees comes from here or from a field checked against these patterns: a snapshot file is
# data, so nothing it says may reach pip as an option (``--find-links``, ``--no-binary``, ``--log``, ``-r``).
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64")
PYTHON_VERSIONS = ("3.11", "3.12")
# PEP 508 names; versions are then held to PEP 440's normalized spelling, which has no spaces, slashes or '@'.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_name(name: object) -> str:
    """A PEP 503-normalized distribution name, else ValueError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or normalize_name(name) != name:
        raise ValueError(f"not a normalized package name: {name!r}")
    return name


def check_version(version: object) -> str:
    """An exact release in PEP 440's normalized spelling (``0.33.0``, ``2.0.0rc1``), else ValueError."""
    from packaging.version import InvalidVersion, Version

    if not isinstance(version, str) or not version.isascii():
        raise ValueError(f"not a PEP 440 version: {version!r}")
    try:
        normal = str(Version(version))
    except InvalidVersion:
        raise ValueError(f"not a PEP 440 version: {version!r}") from None
    if normal != version:
        raise ValueError(f"not a normalized PEP 440 version: {version!r} (normalized: {normal!r})")
    return version


def check_sha256(digest: object) -> str:
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(f"not a sha256 (64 lower-case hex digits): {digest!r}")
    return digest


@dataclass(frozen=True)
class PipRequest:
    """One ``pip download`` of one released wheel; every field is checked when the request is made."""

    name: str
    version: str
    python_version: str
    ignore_requires_python: bool = False
    expected_sha256: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        check_version(self.version)
        if self.python_version not in PYTHON_VERSIONS:
            raise ValueError(f"python version {self.python_version!r} is not one of {PYTHON_VERSIONS}")
        if not isinstance(self.ignore_requires_python, bool):
            raise ValueError("ignore_requires_python must be a bool")
        if self.expected_sha256 is not None:
            check_sha256(self.expected_sha256)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    def options(self) -> list[str]:
        """The selection options (platform, Python), as written into a snapshot's ``pip_download`` record."""
        args: list[str] = []
        for p in PLATFORMS:
            args += ["--platform", p]
        args += ["--python-version", self.python_version]
        if self.ignore_requires_python:
            args.append("--ignore-requires-python")
        return args

    def record(self) -> str:
        """The command a snapshot records (for people to read; it is never parsed back into arguments)."""
        return " ".join(["pip download --no-deps --only-binary=:all:", *self.options(), self.requirement])


def pip_download_argv(request: PipRequest, cache: Path, req_file: Path | None = None) -> list[str]:
    """The exact argument list ``pip_download`` runs: wheels only (no build, so no code of the package
    runs), no dependencies, the index from pip's own configuration; with a hash the requirement goes
    through a requirements file that fp8spec writes, so pip refuses any other file."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--dest",
        str(cache),
        *request.options(),
    ]
    if request.expected_sha256:
        if req_file is None:
            raise ValueError("a hash-pinned download needs its requirements file")
        return cmd + ["--require-hashes", "-r", str(req_file)]
    return cmd + ["--", request.requirement]


@dataclass
class PipResult:
    path: Path
    command: list[str]
    output: str = ""


def pip_download(request: PipRequest, cache: Path, *, timeout: float = 1800) -> PipResult:
    """Download ``request``'s wheel into ``cache`` (see :func:`pip_download_argv`)."""
    req = request.requirement
    req_file = None
    if request.expected_sha256:
        req_file = cache / f".req-{request.name}-{request.version}.txt"
        req_file.write_text(f"{req} --hash=sha256:{request.expected_sha256}\n")
    cmd = pip_download_argv(request, cache, req_file)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        if req_file is not None:
            req_file.unlink(missing_ok=True)
    out = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise ArtifactError(f"pip download {req} failed (exit {proc.returncode}):\n{out[-3000:]}")
    path = None
    for line in out.splitlines():
        m = re.search(r"(?:Saved|File was already downloaded)\s+(\S+)", line)
        if m:
            path = Path(m.group(1))
    if path is None or not path.is_file():
        candidates = find_cached(request.name, request.version, cache)
        if len(candidates) != 1:
            raise ArtifactError(
                f"pip download {req} finished but the artifact is not identifiable:\n{out[-2000:]}"
            )
        path = candidates[0]
    if not path.is_absolute():
        path = (cache / path.name).resolve()
    return PipResult(path=path, command=cmd, output=out)


@dataclass
class Artifact:
    """A downloaded wheel, read member by member (never unpacked whole)."""

    path: Path
    sha256: str
    _zip: zipfile.ZipFile | None = field(default=None, repr=False)
    _trees: dict = field(default_factory=dict, repr=False)

    @property
    def filename(self) -> str:
        return self.path.name

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def zip(self) -> zipfile.ZipFile:
        if self._zip is None:
            try:
                self._zip = zipfile.ZipFile(self.path)
            except zipfile.BadZipFile as e:
                raise ArtifactError(f"{self.path} is not a wheel/zip: {e}") from e
        return self._zip

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def __enter__(self) -> "Artifact":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def names(self) -> list[str]:
        return sorted(self.zip.namelist())

    def has(self, member: str) -> bool:
        try:
            self.zip.getinfo(member)
            return True
        except KeyError:
            return False

    def read_text(self, member: str) -> str:
        try:
            return self.zip.read(member).decode("utf-8")
        except KeyError:
            raise ArtifactError(f"{self.filename} has no member {member!r}") from None

    def tree(self, member: str) -> ast.Module:
        """Parsed (cached) syntax tree of a Python member."""
        if member not in self._trees:
            self._trees[member] = _ast.parse(self.read_text(member), member)
        return self._trees[member]

    def glob(self, prefix: str, suffix: str = ".py") -> Iterator[str]:
        for n in self.names():
            if n.startswith(prefix) and n.endswith(suffix):
                yield n

    def extract_prefix(self, prefix: str, dest: Path) -> Path:
        """Extract only the members under ``prefix`` into ``dest`` (used for verl's YAML tree)."""
        for info in self.zip.infolist():
            if info.filename.startswith(prefix) and not info.is_dir():
                target = dest / info.filename
                if ".." in Path(info.filename).parts:
                    raise ArtifactError(f"unsafe member name {info.filename!r}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self.zip.read(info))
        return dest / prefix


def open_artifact(path: Path) -> Artifact:
    return Artifact(path=path, sha256=sha256_file(path))
