"""``fp8spec backends``: the backend releases fp8spec compiles for, their snapshots and the drift report.

    fp8spec backends list                          kinds, profiled versions, snapshots, the default stack
    fp8spec backends refresh vllm==0.33.0 [...]    download the wheel (pip, cached) and rewrite its snapshot
    fp8spec backends verify [SNAPSHOT ...]         do the snapshots still match the wheels they name?
    fp8spec backends check [KIND[==VERSION] ...]   do the snapshots still confirm what the profiles rely on?

Exit codes: 0 ok; 1 drift (a snapshot differs from its wheel, or a profile fact or source is no longer
confirmed); 2 bad usage or input (unknown package or version, malformed spec or snapshot) or a download
that failed (network, pip), reported as one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, List, NoReturn, Optional

import typer

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_BAD_INPUT = 2

backends_app = typer.Typer(
    name="backends",
    help="Backend releases: profiles, schema snapshots from the released wheels, and the drift report. "
    "Exit codes: 0 ok, 1 drift or mismatch, 2 bad usage or input, or a failed download.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(code: int, message: str) -> NoReturn:
    from fp8spec.cli_options import fail

    fail(code, message)  # with --format json also a JSON error object on stdout


def _one_line(text: object, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _artifact_error(spec: str, err: Exception) -> str:
    """One line for a failed pip download: the network reason, else pip's last ERROR line."""
    text = str(err)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    network = (
        "NewConnectionError",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Name or service not known",
        "Network is unreachable",
        "ConnectTimeout",
        "ReadTimeout",
        "No route to host",
        "Connection refused",
    )
    if any(n in text for n in network):
        reason = next((ln for ln in lines if any(n in ln for n in network)), lines[-1] if lines else text)
        host = re.search(r"host='([^']+)', port=(\d+)", reason)
        why = re.search(r"Failed to establish a new connection: [^\"')]+", reason) or next(
            (m for m in (re.search(re.escape(n), reason) for n in network[2:]) if m), None
        )
        if why:
            reason = (f"{host.group(1)}:{host.group(2)}: " if host else "") + why.group(0).strip()
        return _one_line(f"cannot download {spec}: network unreachable ({reason})")
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    reason = errors[-1][len("ERROR:") :].strip() if errors else (lines[-1] if lines else text)
    if "(from versions: none)" in text:
        reason += " (pip saw no release at all: the index is unreachable, or the package name is wrong)"
    return _one_line(f"cannot download {spec}: {reason}")


def _stack_by_kind() -> dict[str, str]:
    from fp8spec.stack import default_stack
    from fp8spec.targets import STACK_KINDS

    return {STACK_KINDS[field]: version for field, version in default_stack().items() if field in STACK_KINDS}


def _snapshot_versions(directory=None) -> dict[str, list[str]]:
    from fp8spec.profiles import version_key
    from fp8spec.snapshots import list_snapshots

    out: dict[str, list[str]] = {}
    for path in list_snapshots(directory):
        package, _, version = path.stem.rpartition("-")
        out.setdefault(package, []).append(version)
    return {k: sorted(v, key=version_key) for k, v in out.items()}


@backends_app.command("list")
def list_backends(
    format: str = typer.Option("text", "--format", "-f", help="Output format: text or json."),
) -> None:
    """Backend kinds, their profiled versions, the snapshots and the default stack."""
    from fp8spec.profiles import KINDS, available_versions

    if format not in ("text", "json"):
        _fail(EXIT_BAD_INPUT, f"--format must be text or json, not {format!r}")
    stack = _stack_by_kind()
    snaps = _snapshot_versions()
    rows: list[dict[str, Any]] = [
        {"kind": k, "profiles": available_versions(k), "default": stack.get(k), "snapshots": snaps.get(k, [])}
        for k in KINDS
    ]
    extra = {k: v for k, v in snaps.items() if k not in KINDS}
    if format == "json":
        typer.echo(json.dumps({"backends": rows, "other_snapshots": extra, "default_stack": stack}, indent=2))
        return
    typer.echo(f"{'kind':<20}{'profiled versions':<22}{'default':<10}snapshots")
    for r in rows:
        typer.echo(
            f"{r['kind']:<20}{', '.join(r['profiles']) or '-':<22}{r['default'] or '-':<10}"
            f"{', '.join(r['snapshots']) or '-'}"
        )
    for k, versions in extra.items():
        typer.echo(f"{k:<20}{'-':<22}{'-':<10}{', '.join(versions)}")
    typer.echo("default stack (backends/stack.yaml): " + ", ".join(f"{k} {v}" for k, v in stack.items()))


@backends_app.command()
def refresh(
    specs: Optional[List[str]] = typer.Argument(
        None, help="Exact pins, e.g. vllm==0.33.0.", show_default=False
    ),
    all_: bool = typer.Option(False, "--all", help="Refresh every committed snapshot (backends/snapshots)."),
    cache: Optional[Path] = typer.Option(
        None,
        "--cache",
        help="Cache folder (default $FP8SPEC_CACHE or ~/.cache/fp8spec); wheels go to CACHE/wheels.",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Write snapshots here instead of backends/snapshots."
    ),
) -> None:
    """Download each release's wheel through pip (into the cache) and (re)write its snapshot."""
    from fp8spec.snapshots import ArtifactError, SnapshotError, committed_specs, parse_spec, snapshot_path
    from fp8spec.snapshots import refresh as do_refresh
    from fp8spec.snapshots.core import package_info, read_snapshot

    wanted = list(specs or [])
    if all_:
        wanted += [s for s in committed_specs() if s not in wanted]
    if not wanted:
        _fail(
            EXIT_BAD_INPUT,
            "name at least one release, e.g. 'fp8spec backends refresh vllm==0.33.0', or --all",
        )
    for spec in wanted:  # reject bad input before downloading anything
        try:
            name, _ = parse_spec(spec)
            package_info(name)
        except (ValueError, SnapshotError) as err:
            _fail(EXIT_BAD_INPUT, _one_line(err))
    if out is not None and out.exists() and not out.is_dir():
        _fail(EXIT_BAD_INPUT, f"--out {out} is not a folder")
    for spec in wanted:
        target = snapshot_path(spec, directory=out)
        before = target.read_text(encoding="utf-8") if target.is_file() else None
        try:
            path = do_refresh(spec, cache, out_dir=out)
        except ArtifactError as err:
            _fail(EXIT_BAD_INPUT, _artifact_error(spec, err))
        except SnapshotError as err:
            _fail(EXIT_BAD_INPUT, _one_line(f"{spec}: cannot extract a snapshot: {err}"))
        except OSError as err:
            _fail(EXIT_BAD_INPUT, _one_line(f"{spec}: cannot write the snapshot: {err.strerror or err}"))
        art = read_snapshot(path)["artifact"]
        status = "unchanged" if before == path.read_text(encoding="utf-8") else "wrote"
        typer.echo(f"{spec}: {status} {path} ({art['filename']}, sha256 {art['sha256']})")


def _snapshot_target(item: str, directory=None) -> Path:
    """A snapshot argument: a .json path, or an exact pin such as vllm==0.33.0."""
    from fp8spec.snapshots import snapshot_path

    if item.endswith(".json") or "==" not in item:
        path = Path(item)
    else:
        try:
            path = snapshot_path(item, directory=directory)
        except ValueError as err:
            _fail(EXIT_BAD_INPUT, _one_line(err))
    if not path.is_file():
        _fail(EXIT_BAD_INPUT, f"no snapshot {path}")
    return path


@backends_app.command()
def verify(
    snapshots: Optional[List[str]] = typer.Argument(
        None,
        help="Snapshot files or pins (vllm==0.33.0); default: every snapshot in backends/snapshots.",
        show_default=False,
    ),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Cache folder (as for refresh)."),
) -> None:
    """Re-extract each snapshot from the wheel it names (sha256-pinned) and report any difference."""
    from fp8spec.snapshots import ArtifactError, SnapshotError, list_snapshots, read_snapshot
    from fp8spec.snapshots import verify as do_verify
    from fp8spec.snapshots.core import SnapshotFormatError

    paths = [_snapshot_target(s) for s in snapshots] if snapshots else list_snapshots()
    if not paths:
        _fail(EXIT_BAD_INPUT, "no snapshots to verify")
    # Every file is checked before anything is downloaded: one that does not hold a well-formed snapshot
    # (its artifact fields included) stops the run with its location, and pip is never started for it.
    checked = []
    for path in paths:
        try:
            checked.append((path, read_snapshot(path)))
        except SnapshotFormatError as err:
            _fail(EXIT_BAD_INPUT, _one_line(err))
        except OSError as err:
            _fail(EXIT_BAD_INPUT, _one_line(f"{path}: cannot read: {err.strerror or err}"))
    drift = 0
    for path, raw in checked:
        label = f"{raw['package']}=={raw['version']}"
        try:
            problems = do_verify(path, cache)
        except ArtifactError as err:
            _fail(EXIT_BAD_INPUT, _artifact_error(path.name, err))
        except SnapshotFormatError as err:
            _fail(EXIT_BAD_INPUT, _one_line(err))
        except (SnapshotError, OSError, ValueError) as err:
            _fail(EXIT_BAD_INPUT, _one_line(f"{path}: not a readable snapshot ({type(err).__name__}: {err})"))
        if problems:
            drift += 1
            typer.echo(
                f"DRIFT {label} ({path.name}): {len(problems)} difference(s) from "
                f"{raw['artifact']['filename']}"
            )
            for p in problems:
                typer.echo(f"  - {p}")
        else:
            typer.echo(
                f"ok    {label} ({path.name}) matches {raw['artifact']['filename']} "
                f"(sha256 {raw['artifact']['sha256'][:12]}...)"
            )
    typer.echo(f"{len(paths)} snapshot(s) verified, {drift} stale")
    raise typer.Exit(EXIT_DRIFT if drift else EXIT_OK)


@backends_app.command()
def check(
    selection: Optional[List[str]] = typer.Argument(
        None,
        help="Kinds or pins to check (vllm, vllm==0.33.0); default: every profiled version.",
        show_default=False,
    ),
    snapshots_dir: Optional[Path] = typer.Option(
        None, "--snapshots", help="Snapshot folder (default backends/snapshots)."
    ),
    failures_only: bool = typer.Option(
        False, "--failures-only", help="Print only what is no longer confirmed."
    ),
    format: str = typer.Option("text", "--format", "-f", help="Output format: text or json."),
) -> None:
    """Drift report: does each snapshot still confirm the facts its profile relies on? (exit 1 if not)

    Per profiled version: the profile's source against the snapshot's artifact and sha256, then each fact
    with confirm clauses and whether the snapshot still confirms it; facts without clauses are listed as
    evidence only."""
    from fp8spec.profiles import ProfileError, ProfileNotFound
    from fp8spec.snapshots.drift import MalformedSnapshots, drift_report, render_text

    if format not in ("text", "json"):
        _fail(EXIT_BAD_INPUT, f"--format must be text or json, not {format!r}")
    if snapshots_dir is not None and not snapshots_dir.is_dir():
        _fail(EXIT_BAD_INPUT, f"--snapshots {snapshots_dir} is not a folder")
    try:
        reports = drift_report(selection or None, directory=snapshots_dir)
    except ProfileNotFound as err:
        _fail(EXIT_BAD_INPUT, str(err))
    except ProfileError as err:
        _fail(EXIT_BAD_INPUT, _one_line(err))
    except MalformedSnapshots as err:
        for line in err.lines[:-1]:
            typer.echo(f"fp8spec: error: {_one_line(line)}", err=True)
        _fail(EXIT_BAD_INPUT, _one_line(err.lines[-1]))
    if format == "json":
        typer.echo(
            json.dumps(
                {"ok": all(r.ok for r in reports), "profiles": [r.to_dict() for r in reports]}, indent=2
            )
        )
    else:
        typer.echo(render_text(reports, failures_only=failures_only), nl=False)
    raise typer.Exit(EXIT_OK if all(r.ok for r in reports) else EXIT_DRIFT)
