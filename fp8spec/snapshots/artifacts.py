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
from typing import TYPE_CHECKING, Iterator, Sequence

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


@dataclass
class PipResult:
    path: Path
    command: list[str]
    output: str = ""


def pip_download(
    name: str,
    version: str,
    cache: Path,
    pip_args: Sequence[str],
    *,
    expected_sha256: str | None = None,
    timeout: float = 1800,
) -> PipResult:
    """``pip download --no-deps --only-binary=:all: <pip_args> name==version`` into ``cache``.

    With ``expected_sha256`` the requirement carries ``--hash`` so pip itself refuses a different file.
    """
    req = f"{name}=={version}"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--dest",
        str(cache),
        *pip_args,
    ]
    req_file = None
    if expected_sha256:
        req_file = cache / f".req-{normalize_name(name)}-{version}.txt"
        req_file.write_text(f"{req} --hash=sha256:{expected_sha256}\n")
        cmd += ["--require-hashes", "-r", str(req_file)]
    else:
        cmd.append(req)
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
        candidates = find_cached(name, version, cache)
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
