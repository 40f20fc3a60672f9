"""What the fp8spec commands share: the --backend and --format options with their completions, and the
one-line error exit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from fp8spec.diagnostics import EXIT_BAD_INPUT, EXIT_RULE_ERRORS, printable, render_json, summary_line
from fp8spec.targets import BACKENDS

BACKEND_HELP = (
    f"{', '.join(BACKENDS[:-2])} (a verl run), or {' / '.join(BACKENDS[-2:])} (a "
    "standalone server for evaluation). Default: the spec's training.backend + rollout.engine; "
    "another backend retargets the spec: every rule checks it as if it said so."
)


def complete_backend(incomplete: str) -> list[str]:
    return [b for b in BACKENDS if b.startswith(incomplete)]


def complete_code(incomplete: str) -> list[str]:
    from fp8spec.rules.registry import all_rules
    from fp8spec.specfile.codes import input_codes

    codes = [r.code for r in all_rules()] + list(input_codes())
    return [c for c in codes if c.startswith(incomplete.upper())]


def _complete_format(incomplete: str) -> list[str]:
    return [f for f in ("text", "json") if f.startswith(incomplete)]


def backend_option(help_text: str = BACKEND_HELP) -> Any:
    return typer.Option(
        None, "--backend", "-b", metavar="BACKEND", help=help_text, autocompletion=complete_backend
    )


def format_option() -> Any:
    return typer.Option(
        "text",
        "--format",
        "-f",
        metavar="[text|json]",
        help="Output format.",
        autocompletion=_complete_format,
    )


# Set by the entry point when the command line asked for JSON (--format json): then every failure also
# prints one JSON object on stdout, so a CI that parses stdout always gets JSON.
JSON_OUTPUT = {"on": False}


def json_failure(kind: str, message: str) -> None:
    failure = {"error": {"kind": kind, "message": message}, "files": []}
    typer.echo(json.dumps(failure, indent=2, sort_keys=True))


def fail(code: int, message: str) -> NoReturn:
    """Print one located line (``fp8spec: error: ...``) and exit with ``code``."""
    if JSON_OUTPUT["on"]:
        json_failure("usage" if code == EXIT_BAD_INPUT else "error", printable(message))
    typer.echo(f"fp8spec: error: {printable(message)}", err=True)
    raise typer.Exit(code)


def usage_error(message: str) -> NoReturn:
    fail(EXIT_BAD_INPUT, message)


def output_folder(text: str) -> Path:
    """The folder ``-o`` names. An empty or blank name (an unset ``$OUT``) is refused: read as a path it would
    be the current folder, and the command would write there unasked."""
    if not text.strip():
        usage_error(f"-o {text!r} names no folder (an unset variable?); give one, e.g. -o bundles")
    return Path(text)


def write_outputs(targets: list, to_stderr: bool = False) -> None:
    """Write files through fp8spec.safe_write (all or none) and say what was written; a refusal or an I/O
    error is one line and exit 2."""
    from fp8spec.safe_write import WriteError, write_files

    try:
        written = write_files(targets)
    except WriteError as err:
        fail(EXIT_BAD_INPUT, f"{err}; nothing written")
    for target, new in zip(targets, written):
        name = printable(str(target.path))
        typer.echo(f"wrote {name}" if new else f"{name} unchanged: it holds this content", err=to_stderr)


def validate_on_backend(spec: Path, backend: Optional[str], gpu: Optional[str] = None) -> tuple[Any, Any]:
    """Validate ``spec`` as compiled for ``backend`` (its own when None) and say on stderr how it was
    retargeted; unreadable input or an unknown backend exits EXIT_BAD_INPUT with one line.
    Returns (Validation, BackendChoice); the caller decides what errors in the spec mean for it."""
    from fp8spec.compiler.build import BackendChoiceError, retarget_note, validate_for
    from fp8spec.specfile.loader import InputError

    try:
        validation, choice = validate_for(spec, str(spec), backend, gpu)
    except BackendChoiceError as err:
        fail(EXIT_BAD_INPUT, str(err))
    except InputError as err:
        if JSON_OUTPUT["on"]:
            typer.echo(render_json({str(spec): [err.diagnostic]}))
        typer.echo(err.diagnostic.render(), err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    note = retarget_note(validation, choice)
    if note:
        typer.echo(f"{printable(str(spec))}: {note}", err=True)
    return validation, choice


def check_format(format: str) -> None:
    if format not in ("text", "json"):
        usage_error(f"--format must be text or json, not {format!r}")


def validated(spec: Path, backend: Optional[str], outcome: str = "nothing written") -> tuple[Any, Any]:
    """Validate a spec for compile/explain/diff (retargeted to ``backend``): errors print located diagnostics,
    then ``outcome`` (what the command did not do), and exit non-zero (with --format json, also as JSON on
    stdout)."""
    validation, choice = validate_on_backend(spec, backend)
    if validation.errors:
        if JSON_OUTPUT["on"]:
            typer.echo(render_json({str(spec): validation.diagnostics}))
        for d in validation.diagnostics:
            typer.echo(d.render(), err=True)
        summary = summary_line(validation.diagnostics)
        typer.echo(f"{printable(str(spec))}: {summary}; {outcome}", err=True)
        raise typer.Exit(EXIT_RULE_ERRORS)
    return validation, choice
