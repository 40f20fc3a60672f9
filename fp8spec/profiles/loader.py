"""Find, parse and cache backend profiles under ``backends/<kind>/<version>.yaml``."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from fp8spec.profiles.model import KINDS, Profile
from fp8spec.resources import data_dir

# Only these sub-folders of backends/ hold profiles; others (e.g. snapshots/) belong to other tools.
_PROFILE_SUFFIX = ".yaml"
_VERSION_FILE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$")


class ProfileError(ValueError):
    """A profile file exists but is not a well-formed profile."""

    def __init__(self, path: Path | str, problems: list[str]):
        self.path = Path(path)
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"malformed backend profile {self.path}"
        if len(self.problems) == 1:
            return f"{head}: {self.problems[0]}"
        return head + ":\n" + "\n".join(f"  - {p}" for p in self.problems)


class ProfileNotFound(LookupError):
    """No profile for that backend kind and version; ``available`` lists the versions there are."""

    def __init__(self, kind: str, version: str, available: list[str]):
        self.kind, self.version, self.available = kind, version, list(available)
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.kind not in KINDS:
            return f"unknown backend kind {self.kind!r}; supported kinds: {', '.join(KINDS)}"
        have = ", ".join(self.available) if self.available else "none"
        return f"no {self.kind} profile for version {self.version!r}; supported versions: {have}"


def version_key(version: str) -> tuple:
    """Sort key for release versions: numeric components compare as numbers (0.5.12 > 0.5.9)."""
    m = re.match(r"^([0-9]+(?:\.[0-9]+)*)(.*)$", version)
    if not m:
        return ((), 0, version)
    release = tuple(int(x) for x in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:  # 2.3 == 2.3.0
        release = release[:-1]
    suffix = m.group(2).lstrip(".-+")
    # pre-releases (dev/a/b/rc) < final < post-releases
    rank = 1 if not suffix else (2 if suffix.startswith("post") else 0)
    return (release, rank, suffix)


def backends_root() -> Path:
    return data_dir("backends")


def _kind_dir(kind: str) -> Path:
    if kind not in KINDS:
        raise ProfileNotFound(kind, "", [])
    return backends_root() / kind


def available_kinds() -> list[str]:
    return list(KINDS)


def available_versions(kind: str) -> list[str]:
    """Versions that have a profile for ``kind``, oldest first."""
    return list(_available_versions(kind))


@lru_cache(maxsize=None)
def _available_versions(kind: str) -> tuple[str, ...]:
    folder = _kind_dir(kind)
    if not folder.is_dir():
        return ()
    files = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(_PROFILE_SUFFIX)]
    stems = [p.name[: -len(_PROFILE_SUFFIX)] for p in files]
    versions = [stem for stem in stems if _VERSION_FILE.match(stem)]
    return tuple(sorted(versions, key=version_key))


def latest_version(kind: str) -> str:
    versions = available_versions(kind)
    if not versions:
        raise ProfileNotFound(kind, "latest", [])
    return versions[-1]


def profile_path(kind: str, version: str) -> Path:
    return _kind_dir(kind) / f"{version}{_PROFILE_SUFFIX}"


def load_profile(kind: str, version: str) -> Profile:
    """The parsed profile for ``kind`` at ``version`` (cached).

    Raises ProfileNotFound (listing the supported versions) when there is none, and ProfileError
    when the file is malformed.
    """
    if kind not in KINDS:
        raise ProfileNotFound(kind, version, [])
    if version not in _available_versions(kind):
        raise ProfileNotFound(kind, version, list(_available_versions(kind)))
    return _load_cached(kind, version)


@lru_cache(maxsize=None)
def _load_cached(kind: str, version: str) -> Profile:
    path = profile_path(kind, version)
    profile = parse_profile_file(path)
    problems = []
    if profile.kind != kind:
        problems.append(f"kind {profile.kind!r} does not match its folder {kind!r}")
    if profile.version != version:
        problems.append(f"version {profile.version!r} does not match its file name {version!r}")
    if problems:
        raise ProfileError(path, problems)
    return profile


def parse_profile_text(text: str, where: Path | str = "<string>") -> Profile:
    """Parse and validate profile YAML text; ProfileError names every problem found."""
    yaml = YAML(typ="safe", pure=True)
    try:
        data = yaml.load(text)
    except YAMLError as exc:
        raise ProfileError(where, [f"not valid YAML: {' '.join(str(exc).split())}"]) from None
    if not isinstance(data, dict):
        raise ProfileError(where, [f"top level must be a mapping, got {type(data).__name__}"])
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(where, _describe(exc)) from None


def parse_profile_file(path: Path | str) -> Profile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(path, [f"cannot read: {exc.strerror or exc}"]) from None
    return parse_profile_text(text, path)


def _describe(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__") or "<top>"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key (not part of the profile format)"
        elif err.get("type") == "missing":
            msg = "required key is missing"
        out.append(f"{loc}: {msg}")
    return out


def clear_cache() -> None:
    """Forget parsed profiles (tests that write profiles use this)."""
    _available_versions.cache_clear()
    _load_cached.cache_clear()
