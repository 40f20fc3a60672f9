"""The drift report: does each release's schema snapshot still confirm the facts its profile relies on?

A profile fact with ``confirm:`` clauses (see :class:`fp8spec.profiles.model.Confirm`) is checked against
the snapshot extracted from the same release (``backends/snapshots/<package>-<version>.json``); a fact
without them is *evidence only* (behaviour read from code paths, upstream statements) and is listed, not
checked. The profile's ``source`` (artifact file name and sha256) must also be the file the snapshot was
extracted from, so both describe the same bytes.

    from fp8spec.snapshots.drift import drift_report
    reports = drift_report()               # every profiled version
    all(r.ok for r in reports)

``fp8spec backends check`` prints this report and exits 1 on any mismatch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from fp8spec.profiles.loader import available_versions, load_profile
from fp8spec.profiles.model import KINDS, Confirm, Profile


@dataclass
class ClauseResult:
    clause: Confirm
    snapshot: str  # "vllm==0.33.0"
    confirmed: bool
    detail: str = ""

    def describe(self) -> str:
        return self.clause.describe()


@dataclass
class FactCheck:
    fact_id: str
    clauses: list[ClauseResult]

    @property
    def confirmed(self) -> bool:
        return all(c.confirmed for c in self.clauses)


@dataclass
class ProfileReport:
    kind: str
    version: str
    snapshot: str  # path of the snapshot that was read (or would be)
    source_problems: list[str] = field(default_factory=list)
    facts: list[FactCheck] = field(default_factory=list)
    evidence_only: list[str] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return f"{self.kind}=={self.version}"

    @property
    def mismatches(self) -> list[FactCheck]:
        return [f for f in self.facts if not f.confirmed]

    @property
    def ok(self) -> bool:
        return not self.source_problems and not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": self.version,
            "snapshot": self.snapshot,
            "ok": self.ok,
            "source_problems": list(self.source_problems),
            "facts": [
                {
                    "id": f.fact_id,
                    "confirmed": f.confirmed,
                    "clauses": [
                        {
                            "check": c.describe(),
                            "snapshot": c.snapshot,
                            "confirmed": c.confirmed,
                            "detail": c.detail,
                        }
                        for c in f.clauses
                    ],
                }
                for f in self.facts
            ],
            "evidence_only": list(self.evidence_only),
        }


class MalformedSnapshots(ValueError):
    """Files the report needed that do not hold well-formed snapshots; ``lines`` has one located line each."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class _Snapshots:
    """Loads each snapshot once; a missing or unreadable one is remembered as the reason, a malformed one
    also in ``malformed`` (the report is then refused: its verdicts would rest on a file that is not data
    fp8spec wrote)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = directory
        self._cache: dict[str, Any] = {}
        self.malformed: dict[str, str] = {}

    def path(self, spec: str) -> Path:
        from fp8spec.snapshots import snapshot_path

        return snapshot_path(spec, directory=self.directory)

    def get(self, spec: str):
        if spec not in self._cache:
            from fp8spec.snapshots import Snapshot

            path = self.path(spec)
            if not path.is_file():
                self._cache[spec] = f"no snapshot at {path} (run: fp8spec backends refresh {spec})"
            else:
                from fp8spec.snapshots.core import SnapshotFormatError

                try:
                    self._cache[spec] = Snapshot.load(path)
                except SnapshotFormatError as e:
                    self._cache[spec] = f"not a snapshot: {e}"
                    self.malformed[str(path)] = str(e)
                except OSError as e:
                    self._cache[spec] = f"unreadable snapshot {path}: {e.strerror or e}"
        return self._cache[spec]


def _query_facts(clause: Confirm, fact_value: Any) -> list[Any]:
    """The snapshot query facts (fp8spec.snapshots.Fact) one clause stands for."""
    from fp8spec.snapshots import Fact as QueryFact

    if clause.kind == "choices":
        values = clause.value if clause.value is not None else fact_value
        return [QueryFact("choice", clause.subject, v, clause.present) for v in values]
    return [QueryFact(clause.kind, clause.subject, clause.value, clause.present)]


def check_clause(clause: Confirm, fact_value: Any, spec: str, snapshots: _Snapshots) -> ClauseResult:
    target = clause.snapshot or spec
    snap = snapshots.get(target)
    if isinstance(snap, str):
        return ClauseResult(clause, target, False, snap)
    failed, details = [], []
    for q in _query_facts(clause, fact_value):
        ok, detail = snap.confirm(q)
        if not ok:
            failed.append(q)
            details.append(f"{q.describe()}: {detail}" if clause.kind == "choices" else detail)
    if not failed:
        return ClauseResult(clause, target, True, "")
    return ClauseResult(clause, target, False, "; ".join(d for d in details if d) or "not confirmed")


def check_profile(
    profile: Profile, directory: str | os.PathLike[str] | None = None, snapshots: Optional[_Snapshots] = None
) -> ProfileReport:
    """Check one profile's confirm clauses and source against the snapshots in ``directory``
    (default backends/snapshots)."""
    from fp8spec.snapshots.query import compare_source

    snapshots = snapshots or _Snapshots(directory)
    spec = f"{profile.kind}=={profile.version}"
    report = ProfileReport(profile.kind, profile.version, str(snapshots.path(spec)))
    own = snapshots.get(spec)
    if isinstance(own, str):
        report.source_problems = [own]
    else:
        report.source_problems = compare_source(
            spec, own.raw["artifact"], profile.source.artifact, profile.source.sha256
        )
    for fact_id, fact in profile.facts.items():
        if not fact.confirm:
            report.evidence_only.append(fact_id)
            continue
        clauses = [check_clause(c, fact.value, spec, snapshots) for c in fact.confirm]
        report.facts.append(FactCheck(fact_id, clauses))
    return report


def drift_report(
    selection: Optional[Iterable[str]] = None,
    directory: str | os.PathLike[str] | None = None,
) -> list[ProfileReport]:
    """One report per profiled version, in kind then version order.

    ``selection`` narrows it: ``"vllm"`` (every vllm version) or ``"vllm==0.33.0"``. Raises
    :class:`fp8spec.profiles.ProfileNotFound` for a kind or version without a profile, and
    :class:`MalformedSnapshots` when a snapshot it reads is not well-formed."""
    from fp8spec.profiles.loader import ProfileNotFound

    wanted: list[tuple[str, str]] = []
    if not selection:
        wanted = [(k, v) for k in KINDS for v in available_versions(k)]
    else:
        for item in selection:
            kind, _, version = item.partition("==")
            kind = kind.strip().lower().replace("_", "-")
            if kind not in KINDS:
                raise ProfileNotFound(kind, version, [])
            versions = [version.strip()] if version else available_versions(kind)
            for v in versions:
                if v not in available_versions(kind):
                    raise ProfileNotFound(kind, v, available_versions(kind))
                if (kind, v) not in wanted:
                    wanted.append((kind, v))
    snapshots = _Snapshots(directory)
    reports = [check_profile(load_profile(k, v), snapshots=snapshots) for k, v in wanted]
    if snapshots.malformed:
        raise MalformedSnapshots([snapshots.malformed[p] for p in sorted(snapshots.malformed)])
    return reports


def render_text(reports: list[ProfileReport], *, failures_only: bool = False) -> str:
    lines: list[str] = []
    for r in reports:
        status = "ok" if r.ok else "DRIFT"
        n_ok = sum(f.confirmed for f in r.facts)
        lines.append(
            f"{r.kind} {r.version}: {status} ({n_ok}/{len(r.facts)} facts confirmed by "
            f"{Path(r.snapshot).name}, "
            f"{len(r.evidence_only)} evidence only)"
        )
        for p in r.source_problems:
            lines.append(f"  FAIL  source: {p}")
        if not r.source_problems and not failures_only:
            lines.append("  ok    source: the profile's artifact and sha256 are the snapshot's")
        for f in r.facts:
            if f.confirmed and failures_only:
                continue
            checks = "; ".join(c.describe() for c in f.clauses)
            lines.append(f"  {'ok  ' if f.confirmed else 'FAIL'}  {f.fact_id}: {checks}")
            for c in f.clauses:
                if not c.confirmed:
                    lines.append(f"          {c.describe()}: {c.detail}")
        if r.evidence_only and not failures_only:
            lines.append(f"  evidence only: {', '.join(r.evidence_only)}")
    facts = sum(len(r.facts) for r in reports)
    bad = sum(len(r.mismatches) + (1 if r.source_problems else 0) for r in reports)
    ev = sum(len(r.evidence_only) for r in reports)
    lines.append(
        f"{len(reports)} profiles: {facts} facts checked against snapshots, {bad} mismatch"
        f"{'' if bad == 1 else 'es'}, {ev} evidence only"
    )
    return "\n".join(lines) + "\n"
