"""Snapshot files: build from a released artifact, write deterministically, verify, load.

A snapshot is ``backends/snapshots/<package>-<version>.json``::

    {"format": 1, "package": "vllm", "version": "0.33.0",
     "artifact": {"filename": ..., "sha256": ..., "size": ..., "pip_download": "..."},
     "extractor": {"module": "fp8spec.engines.vllm.snapshot", "version": 1},
     "data": {...}}

The JSON is written with sorted keys and a fixed indent, and contains no timestamps, so regenerating a
snapshot from the same artifact with the same extractor gives identical bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from fp8spec.safe_write import Target, WriteError, prepare_folder, write_file

from . import artifacts as _art
from .packages import PACKAGES as PACKAGES  # re-exported: callers name them through core
from .packages import PackageInfo as PackageInfo
from .packages import SnapshotError as SnapshotError
from .packages import SnapshotFormatError as SnapshotFormatError

if TYPE_CHECKING:
    pass

FORMAT = 1
MAX_DIFFERENCES = 200

# Wheels are chosen for linux x86_64 (artifacts.PLATFORMS) and CPython 3.11 (3.12 when a release requires
# it), whatever the machine running the refresh is, so the recorded artifact (and its sha256) does not
# depend on it.


def committed_specs(directory: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """The releases whose snapshots ``backends/snapshots`` holds, as exact pins (``refresh --all`` rewrites these):
    every profiled release, plus megatron-core 0.16.1, the release the tests install for Megatron's own checks."""
    out = []
    for path in list_snapshots(directory):
        name, _, version = path.stem.rpartition("-")
        out.append(f"{name}=={version}")
    return tuple(out)


def package_info(name: str) -> PackageInfo:
    key = _art.normalize_name(name)
    if key not in PACKAGES:
        raise SnapshotError(f"no snapshot extractor for package {name!r}; known: {sorted(PACKAGES)}")
    return PACKAGES[key]


# ----------------------------------------------------------------------------- locations
def snapshot_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """``directory``, else ``backends/snapshots`` of this checkout / installation."""
    if directory is not None:
        return Path(directory)
    from fp8spec.resources import data_dir

    return data_dir("backends") / "snapshots"


def snapshot_path(
    spec_or_name: str, version: str | None = None, directory: str | os.PathLike[str] | None = None
) -> Path:
    """Path of the snapshot for ``"vllm==0.33.0"`` (or ``("vllm", "0.33.0")``); underscores in the name
    are accepted (``megatron_core``)."""
    if version is None:
        name, version = _art.parse_spec(spec_or_name)
    else:
        name = _art.normalize_name(spec_or_name)
    return snapshot_dir(directory) / f"{name}-{version}.json"


def list_snapshots(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    d = snapshot_dir(directory)
    return sorted(d.glob("*.json")) if d.is_dir() else []


# ----------------------------------------------------------------------------- build / write
def dumps(snapshot: dict[str, Any]) -> str:
    return json.dumps(snapshot, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def build_snapshot(name: str, version: str, artifact: _art.Artifact, python_version: str) -> dict[str, Any]:
    info = package_info(name)
    mod = info.extractor()
    data = mod.extract(artifact)
    snapshot = {
        "format": FORMAT,
        "package": info.name,
        "version": version,
        "artifact": {
            "filename": artifact.filename,
            "sha256": artifact.sha256,
            "size": artifact.size,
            "pip_download": info.request(version, python_version).record(),
        },
        "extractor": {"module": mod.__name__, "version": mod.EXTRACTOR_VERSION},
        "data": data,
    }
    # Round-trip through JSON so what verify compares is exactly what is stored.
    return json.loads(dumps(snapshot))


def download(
    spec: str,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    expected_sha256: str | None = None,
    python_versions: Sequence[str] | None = None,
) -> tuple[Path, str]:
    """Download (or find in the cache) the artifact for ``spec``; return its path and the Python version
    its wheel was chosen for. Only the package's own settings (``PACKAGES``) shape pip's arguments."""
    name, version = _art.parse_spec(spec)
    info = package_info(name)
    requests = [
        info.request(version, v, expected_sha256)
        for v in (info.python_versions if python_versions is None else python_versions)
    ]
    cache = _art.wheel_cache(cache_dir)
    errors = []
    for request in requests:
        try:
            result = _art.pip_download(request, cache)
            return result.path, request.python_version
        except _art.ArtifactError as e:
            errors.append(str(e))
            if "HASH" in str(e).upper() and "MATCH" in str(e).upper():
                break
    raise _art.ArtifactError("\n\n".join(errors))


def refresh(
    spec: str,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Download ``spec`` (e.g. ``"vllm==0.33.0"``) through pip into the cache and (re)write its snapshot.

    Returns the path written (``backends/snapshots/<package>-<version>.json`` unless ``out_dir``)."""
    name, version = _art.parse_spec(spec)
    path, python_version = download(spec, cache_dir)
    with _art.open_artifact(path) as art:
        snapshot = build_snapshot(name, version, art, python_version)
    out = snapshot_path(name, version, out_dir)
    try:
        prepare_folder(out.parent)
        write_file(Target(out, dumps(snapshot).encode("utf-8"), ours=_is_snapshot))
    except WriteError as err:  # the CLI reports an OSError as "cannot write the snapshot: ..."
        raise OSError(str(err)) from None
    return out


def _is_snapshot(old: bytes) -> bool:
    """A snapshot file (what refresh rewrites); anything else at its name is the user's and stays."""
    try:
        data = json.loads(old)
    except ValueError:
        return False
    return isinstance(data, dict) and "package" in data and "artifact" in data


def refresh_all(
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    specs: Sequence[str] | None = None,
) -> list[Path]:
    """Rewrite ``specs`` (default: every committed snapshot)."""
    return [refresh(s, cache_dir, out_dir=out_dir) for s in (committed_specs() if specs is None else specs)]


# ----------------------------------------------------------------------------- verify
def read_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot at ``path``, checked field by field (:mod:`.checks`); a file that does not hold one
    raises :class:`SnapshotFormatError` naming the file and the field."""
    from .checks import read_checked

    return read_checked(path)


def artifact_for(snapshot: dict[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cached artifact a snapshot names, downloaded (pip, hash-pinned) when it is not cached.

    The download is rebuilt from the package's own settings and the checked name, version and sha256;
    the recorded ``pip_download`` text only selects which of those settings' Python versions it was."""
    from .checks import check_snapshot

    python_version = check_snapshot(snapshot)
    art = snapshot["artifact"]
    cache = _art.wheel_cache(cache_dir)
    cached = cache / art["filename"]
    if cached.is_file() and not cached.is_symlink() and _art.sha256_file(cached) == art["sha256"]:
        return cached
    spec = f"{snapshot['package']}=={snapshot['version']}"
    path, _ = download(spec, cache_dir, expected_sha256=art["sha256"], python_versions=[python_version])
    return path


def verify(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Recompute the snapshot at ``path`` from its artifact; return the differences (empty = confirmed).

    The artifact is taken from the cache when a file there has the recorded sha256; otherwise pip
    downloads it with ``--require-hashes``, so a re-uploaded or different file is reported, not used.
    A file whose fields do not check (:mod:`.checks`) raises :class:`SnapshotFormatError` before any
    download."""
    recorded = read_snapshot(path)
    problems: list[str] = []
    if recorded["format"] != FORMAT:
        problems.append(f"snapshot format {recorded['format']} != {FORMAT}; run refresh")
    try:
        info = package_info(recorded["package"])
    except SnapshotError as e:
        return [str(e)]
    expected_name = snapshot_path(info.name, recorded["version"], Path(path).parent).name
    if Path(path).name != expected_name:
        problems.append(f"file name {Path(path).name!r} should be {expected_name!r}")
    mod = info.extractor()
    if recorded["extractor"].get("version") != mod.EXTRACTOR_VERSION:
        problems.append(
            f"extractor version changed (snapshot {recorded['extractor'].get('version')}, code "
            f"{mod.EXTRACTOR_VERSION}); run refresh"
        )
    try:
        artifact_path = artifact_for(recorded, cache_dir)
    except _art.ArtifactError as e:
        text = str(e)
        if "HASH" in text.upper() and "MATCH" in text.upper():
            return problems + [
                f"artifact sha256 differs from the recorded {recorded['artifact']['sha256']} "
                f"({recorded['artifact']['filename']}); pip: {' '.join(text.strip().splitlines()[-1].split())}"
            ]
        raise
    fresh = _rebuild(recorded, artifact_path)
    diff(recorded, fresh, "", problems)
    if len(problems) > MAX_DIFFERENCES:
        extra = len(problems) - MAX_DIFFERENCES
        problems = problems[:MAX_DIFFERENCES] + [f"... and {extra} more differences"]
    return problems


def _rebuild(recorded: dict[str, Any], artifact_path: Path) -> dict[str, Any]:
    from .checks import check_snapshot

    python_version = check_snapshot(recorded)
    with _art.open_artifact(artifact_path) as art:
        return build_snapshot(recorded["package"], recorded["version"], art, python_version)


def rebuild(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> str:
    """The exact text ``refresh`` would write for the snapshot at ``path`` (artifact from the cache or pip)."""
    recorded = read_snapshot(path)
    return dumps(_rebuild(recorded, artifact_for(recorded, cache_dir)))


def diff(recorded: Any, fresh: Any, where: str, out: list[str]) -> None:
    """Append human-readable differences between the stored and the recomputed JSON."""
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        for k in sorted(set(recorded) | set(fresh), key=str):
            sub = f"{where}[{json.dumps(k)}]"
            if k not in fresh:
                out.append(f"{sub}: in the snapshot but no longer in the artifact")
            elif k not in recorded:
                out.append(f"{sub}: in the artifact but missing from the snapshot")
            else:
                diff(recorded[k], fresh[k], sub, out)
        return
    if recorded != fresh or type(recorded) is not type(fresh):
        out.append(f"{where}: snapshot has {_short(recorded)}, artifact gives {_short(fresh)}")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def verify_all(
    directory: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> dict[Path, list[str]]:
    """``verify`` every snapshot in ``directory`` (default backends/snapshots); path -> differences."""
    return {p: verify(p, cache_dir) for p in list_snapshots(directory)}
