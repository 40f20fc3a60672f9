"""Run every rule over a loaded spec and turn findings into located diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from fp8spec.diagnostics import Diagnostic
from fp8spec.rules.context import RuleContext, build_context
from fp8spec.rules.registry import all_rules, get_rule
from fp8spec.spec.loader import LoadedSpec, load_spec


@dataclass
class Validation:
    loaded: LoadedSpec
    diagnostics: list[Diagnostic] = field(default_factory=list)
    context: Optional[RuleContext] = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]


def validate_path(path: str | Path, display: str | None = None) -> Validation:
    """Load and check one spec file. Raises InputError (exit 2) when it is not a readable YAML mapping."""
    loaded = load_spec(path, display)
    return validate_loaded(loaded, Path(path).resolve().parent)


def validate_loaded(loaded: LoadedSpec, spec_dir: Path) -> Validation:
    result = Validation(loaded, list(loaded.diagnostics))
    if loaded.spec is None:
        return result
    ctx = build_context(loaded.spec, spec_dir)
    result.context = ctx
    acknowledged = dict(loaded.spec.acknowledge)
    result.diagnostics.extend(_acknowledgement_problems(loaded, acknowledged))
    for rule in all_rules():
        if rule.needs_model and ctx.model is None:
            continue
        try:
            findings = list(rule.check(ctx))
        except Exception as exc:  # a rule bug must not become a user-facing traceback
            line, col = (1, 1)
            result.diagnostics.append(Diagnostic(
                "error", rule.code, f"internal error in rule {rule.name}: {type(exc).__name__}: {exc}",
                loaded.file, line, col, "", "please report this with the spec that triggered it",
            ))
            continue
        for finding in findings:
            severity = rule.severity
            message = finding.message
            if rule.code in acknowledged and rule.acknowledgeable:
                severity = "info"
                message = f"{message} (acknowledged: {acknowledged[rule.code]})"
            line, col = loaded.locate(finding.path)
            result.diagnostics.append(Diagnostic(
                severity, rule.code, message, loaded.file, line, col, finding.path, finding.hint or rule.hint,
            ))
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def _acknowledgement_problems(loaded: LoadedSpec, acknowledged: dict[str, str]) -> list[Diagnostic]:
    out = []
    for code in sorted(acknowledged):
        rule = get_rule(code)
        path = f"acknowledge.{code}"
        line, col = loaded.locate(path, prefer="key")
        if rule is None:
            out.append(Diagnostic("error", "S005", f"acknowledge: no rule has code {code}", loaded.file, line, col,
                                  path, "see `fp8spec rules` for the codes"))
        elif not rule.acknowledgeable:
            out.append(Diagnostic("error", "S005", f"acknowledge: rule {code} ({rule.name}) cannot be acknowledged",
                                  loaded.file, line, col, path, "fix the spec instead"))
    return out
