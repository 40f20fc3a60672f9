"""Run every rule over a loaded spec and turn findings into located diagnostics."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Optional, Union

from fp8spec.diagnostics import Diagnostic, Severity
from fp8spec.resolve.context import ResolvedSpec, build_context
from fp8spec.resolve.valid import Retarget, ValidSpec, spec_backend
from fp8spec.rules.probing import PROBE, Findings, Prober, proposing_with
from fp8spec.rules.registry import Finding, Rule, all_rules, get_rule
from fp8spec.specfile.edit import with_values
from fp8spec.specfile.loader import LoadedSpec, load_spec

# The fields a --backend choice sets: retargeting re-validates the spec as if it said these.
RETARGETABLE = ("training.backend", "rollout.engine", "hardware.gpu")  # --backend; plan --gpu


@dataclass
class Validation:
    loaded: LoadedSpec  # when retargeted, its spec is the retargeted one (the file's text and positions stay)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    context: Optional[ResolvedSpec] = None
    retargeted: tuple[Retarget, ...] = ()
    findings: list[tuple[Rule, Finding, str]] = field(default_factory=list)  # with the severity reported

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def spec_backend(self) -> str:
        """The backend the spec file itself names (before any retargeting)."""
        assert self.loaded.spec is not None  # only asked of a spec that was read
        return spec_backend(self.loaded.spec, self.retargeted)

    def valid(self) -> ValidSpec:
        """The spec as the compiler receives it; raises NotValid when it has errors (check ``errors`` first)."""
        from fp8spec.resolve.valid import NotValid

        if self.loaded.spec is None or self.context is None:
            raise NotValid("the spec could not be read")
        return ValidSpec(
            self.context, self.loaded.sha256, self.retargeted, tuple(self.diagnostics), self.loaded.text
        )


def validate_path(
    path: str | Path, display: str | None = None, retarget: Optional[Mapping[str, str]] = None
) -> Validation:
    """Load and check one spec file. Raises InputError (exit 2) when it is not a readable YAML mapping.

    ``retarget`` ({"training.backend": "fsdp", "rollout.engine": "sglang"}) checks the spec as if it said
    those values: every rule then applies to the target backend."""
    loaded = load_spec(path, display)
    return validate_loaded(loaded, Path(path).resolve().parent, retarget)


def validate_loaded(
    loaded: LoadedSpec, spec_dir: Path, retarget: Optional[Mapping[str, str]] = None
) -> Validation:
    result = Validation(loaded, list(loaded.diagnostics))
    if loaded.spec is None:
        from fp8spec.rules.set_aside import findings_beside

        # the rules that do not depend on the refused fields still speak (one typo hides nothing else), after
        # the schema errors, which are what to fix first
        result.diagnostics.extend(
            sorted(findings_beside(loaded, spec_dir, validate_loaded), key=Diagnostic.sort_key)
        )
        return result
    if retarget:
        result.retargeted = _retargets(loaded, retarget)
        if result.retargeted:
            loaded = dataclasses.replace(loaded, spec=with_values(loaded.spec, retarget))
            result.loaded = loaded
    spec = loaded.spec
    assert spec is not None  # a retargeted spec is still one
    ctx = build_context(spec, spec_dir)
    result.context = ctx
    acknowledged = dict(spec.acknowledge)
    result.diagnostics.extend(_acknowledgement_problems(loaded, acknowledged))
    for rule, findings in run_rules(ctx):
        if isinstance(findings, Exception):  # a rule bug must not become a user-facing traceback
            exc = findings
            result.diagnostics.append(
                Diagnostic(
                    "error",
                    rule.code,
                    f"internal error in rule {rule.name}: {type(exc).__name__}: {exc}",
                    loaded.file,
                    1,
                    1,
                    "",
                    "please report this with the spec that triggered it",
                )
            )
            continue
        for finding in findings:
            severity: Severity = rule.severity
            message = finding.message
            if rule.code in acknowledged and rule.acknowledgeable:
                severity = "info"
                message = f"{message} (acknowledged: {acknowledged[rule.code]})"
            result.findings.append((rule, finding, severity))
            line, col = loaded.locate(finding.path)
            unwritten = _unwritten(loaded, finding.path)
            if unwritten is not None:
                # the field is not in the spec (its default applies): point at the section that would hold it,
                # not at whatever value comes first inside it, and say which field is meant
                line, col = loaded.locate(unwritten, prefer="key") if unwritten else (1, 1)
                where = f"section {unwritten}" if unwritten else "the spec"
                message = (
                    f"{message} [{finding.path}: not set in the spec, its default applies; shown at {where}]"
                )
            result.diagnostics.append(
                Diagnostic(
                    severity,
                    rule.code,
                    message,
                    loaded.file,
                    line,
                    col,
                    finding.path,
                    finding.hint or rule.hint,
                )
            )
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def _unwritten(loaded, path: str) -> Optional[str]:
    """None when ``path`` (or a part of it) is written in the spec; else its nearest written ancestor ('' when
    none is)."""
    from fp8spec.specfile.loader import _split_path

    if not path:
        return None
    parts = _split_path(path)
    positions = loaded.positions
    if positions.has(parts) or any(key[: len(parts)] == parts for key in positions.keys):
        return None
    while parts:
        parts = parts[:-1]
        if positions.has(parts):
            return ".".join(str(p) for p in parts)
    return ""


def run_rules(
    ctx: ResolvedSpec, *, probe: bool = False
) -> Iterator[tuple[Rule, Union[list[Finding], Exception]]]:
    """Every applicable rule with its findings, or the exception it raised. Their hints' proposals are checked
    by one prober for ``ctx`` (shared by all rules); a ``probe`` run (a proposal's check) proposes nothing."""
    prober = PROBE if probe else Prober(ctx, findings_of)
    for rule in all_rules():
        if not rule.applies(ctx):
            continue
        with proposing_with(prober):
            try:
                found: Union[list[Finding], Exception] = list(rule.check(ctx))
            except Exception as exc:  # noqa: BLE001 - reported by the caller
                found = exc
        yield rule, found


def findings_of(ctx: ResolvedSpec) -> Findings:
    """(code, path, severity) of every finding a validation of ``ctx.spec`` reports (acknowledged: info), from
    a probe run: what the prober compares a changed spec by."""
    acknowledged = set(ctx.spec.acknowledge)
    out = set()
    for rule, findings in run_rules(ctx, probe=True):
        if isinstance(findings, Exception):
            out.add((rule.code, "", "error"))
            continue
        severity = "info" if rule.acknowledgeable and rule.code in acknowledged else rule.severity
        out.update((rule.code, f.path, severity) for f in findings)
    return frozenset(out)


def _retargets(loaded: LoadedSpec, retarget: Mapping[str, str]) -> tuple[Retarget, ...]:
    out = []
    for dotted in RETARGETABLE:
        if dotted not in retarget:
            continue
        section, name = dotted.split(".")
        have = getattr(getattr(loaded.spec, section), name)
        if retarget[dotted] != have:
            written = loaded.positions.has((section, name))
            out.append(Retarget(dotted, have, retarget[dotted], written))
    unknown = set(retarget) - set(RETARGETABLE)
    if unknown:
        raise ValueError(f"cannot retarget {', '.join(sorted(unknown))}")
    return tuple(out)


def _acknowledgement_problems(loaded: LoadedSpec, acknowledged: dict[str, str]) -> list[Diagnostic]:
    out = []
    for code in sorted(acknowledged):
        rule = get_rule(code)
        path = f"acknowledge.{code}"
        line, col = loaded.locate(path, prefer="key")
        if rule is None:
            out.append(
                Diagnostic(
                    "error",
                    "S005",
                    f"acknowledge: no rule has code {code}",
                    loaded.file,
                    line,
                    col,
                    path,
                    "see `fp8spec rules` for the codes",
                )
            )
        elif not rule.acknowledgeable:
            out.append(
                Diagnostic(
                    "error",
                    "S005",
                    f"acknowledge: rule {code} ({rule.name}) cannot be acknowledged",
                    loaded.file,
                    line,
                    col,
                    path,
                    "fix the spec instead",
                )
            )
    return out
