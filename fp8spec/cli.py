"""The fp8spec command line.

Exit codes: 0 clean (warnings allowed unless --strict), 1 the spec has errors (schema or rules; with
--strict, warnings too), 2 unreadable or malformed input or bad usage, an output that cannot be written, or
too little memory, 3 an internal error (a bug). A stderr that cannot be written changes no exit code.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any, List, NoReturn, Optional

import typer

from fp8spec import __version__
from fp8spec.cli_backends import backends_app
from fp8spec.cli_diff import diff
from fp8spec.cli_init import init
from fp8spec.cli_options import (
    JSON_OUTPUT,
    backend_option,
    check_format,
    fail,
    format_option,
    json_failure,
    output_folder,
    usage_error,
    validated,
)
from fp8spec.cli_plan import plan
from fp8spec.cli_report import report
from fp8spec.cli_rules import rules
from fp8spec.cli_schema import schema
from fp8spec.completion import COMPLETE_VAR, register_shells
from fp8spec.diagnostics import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_RULE_ERRORS,
    Diagnostic,
    printable,
    render_json,
    summary_line,
)

app = typer.Typer(
    name="fp8spec",
    help="One typed FP8-RL spec: validate it against model, hardware and backend versions; compile it into "
    "launch bundles for verl. Exit codes: 0 ok, 1 spec errors, 2 bad input or usage, or an output that "
    "cannot be written, 3 internal error.",
    no_args_is_help=True,
    add_completion=False,  # fp8spec.completion installs it, through the safe writer
    # Plain help: flags render as flags ('--strict', not '--strict <bool>') with every typer release allowed.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"fp8spec {__version__}")
        raise typer.Exit(EXIT_OK)


def _install_completion_callback(value: bool) -> None:
    if value:
        from fp8spec.completion import CompletionError, install

        try:
            shell, path = install(None)
        except CompletionError as err:
            fail(EXIT_BAD_INPUT, f"--install-completion: {err}")
        typer.echo(f"{shell} completion installed in {printable(str(path))}")
        typer.echo("Completion will take effect once you restart the terminal")
        raise typer.Exit(EXIT_OK)


def _show_completion_callback(value: bool) -> None:
    if value:
        from fp8spec.completion import CompletionError, detect_shell, script

        try:
            text = script(detect_shell())
        except CompletionError as err:
            fail(EXIT_BAD_INPUT, f"--show-completion: {err}")
        typer.echo(text)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
    install_completion: bool = typer.Option(
        False,
        "--install-completion",
        callback=_install_completion_callback,
        is_eager=True,
        help="Install completion for the current shell (bash, zsh or fish).",
    ),
    show_completion: bool = typer.Option(
        False,
        "--show-completion",
        callback=_show_completion_callback,
        is_eager=True,
        help="Show completion for the current shell, to copy it or customize the installation.",
    ),
) -> None:
    """fp8spec command line."""


@app.command()
def validate(
    specs: List[Path] = typer.Argument(
        ..., metavar="SPEC", help="Spec files (YAML).", show_default=False, readable=False
    ),
    format: str = format_option(),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors (exit 1)."),
    backend: Optional[str] = backend_option(),
) -> None:
    """Check specs: every mistake at once, each located like a compiler error, with the reason and the fix."""
    from fp8spec.compiler.build import BackendChoiceError, retarget_note, validate_for
    from fp8spec.specfile.loader import InputError

    check_format(format)
    results: dict[str, list[Diagnostic]] = {}
    notes: dict[str, str] = {}
    exit_code = EXIT_OK
    for path in specs:
        display = str(path)
        try:
            validation, choice = validate_for(path, display, backend)
            diags = validation.diagnostics
            if validation.retargeted:
                notes[display] = retarget_note(validation, choice)
        except BackendChoiceError as err:
            usage_error(str(err))
        except InputError as err:
            diags = [_flag_value_hint(err.diagnostic, path)]
            exit_code = max(exit_code, EXIT_BAD_INPUT)
        results[display] = diags
        if any(d.severity == "error" for d in diags) or (
            strict and any(d.severity == "warning" for d in diags)
        ):
            exit_code = max(exit_code, EXIT_RULE_ERRORS)
    if format == "json":
        extra = (
            {f: {"backend": backend, "retargeted": notes.get(f, "")} for f in results} if backend else None
        )
        typer.echo(render_json(results, extra))
    else:
        for display, diags in results.items():
            for d in diags:
                typer.echo(d.render())
            note = f" ({notes[display]})" if display in notes else ""
            typer.echo(f"{printable(display)}: {summary_line(diags)}{note}")
    raise typer.Exit(exit_code)


def _flag_value_hint(diagnostic: Diagnostic, path: Path) -> Diagnostic:
    """`--strict true`: the flag takes no value, so 'true' was read as a spec file name."""
    if diagnostic.code == "E001" and path.name.lower() in ("true", "false") and not path.exists():
        hint = f"--strict is a flag and takes no value: drop '{path.name}'"
        return dataclasses.replace(diagnostic, hint=hint)
    return diagnostic


app.command()(schema)
app.command()(rules)


@app.command()
def compile(
    spec: Path = typer.Argument(
        ..., metavar="SPEC", help="Spec file (YAML).", show_default=False, readable=False
    ),
    backend: Optional[str] = backend_option(),
    output: str = typer.Option(
        "bundles",
        "--output",
        "-o",
        metavar="DIR",
        help="Folder that receives the bundle folder.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace an existing bundle of the same name, if fp8spec wrote it and nobody changed it "
        "since (anything else at that name is refused).",
    ),
) -> None:
    """Validate SPEC, then write its launch bundle (a folder named after the spec) into OUTPUT."""
    from fp8spec.compiler.build import build_settings_plan
    from fp8spec.compiler.bundle import bundle_files, executable
    from fp8spec.compiler.placement import working_dir_problem
    from fp8spec.compiler.writer import WriteError, write_bundle
    from fp8spec.launchers.base import BundleError

    out_dir = output_folder(output)
    validation, choice = validated(spec, backend)
    for d in validation.diagnostics:
        typer.echo(d.render(), err=True)
    valid = validation.valid()
    problem = working_dir_problem(valid.spec, out_dir / valid.spec.name)
    if problem is not None:
        line, col = validation.loaded.locate(problem[0])
        typer.echo(
            f"{printable(str(spec))}:{line}:{col}: error {problem[0]}: {printable(problem[1])}; nothing written",
            err=True,
        )
        raise typer.Exit(EXIT_RULE_ERRORS)
    plan = build_settings_plan(valid, choice)
    try:
        files = bundle_files(valid, choice, plan, printable(str(spec)))  # the name is shown in README.md
    except BundleError as err:
        typer.echo(f"{printable(str(spec))}: error: {printable(str(err))}; nothing written", err=True)
        raise typer.Exit(EXIT_RULE_ERRORS) from None
    try:
        target = write_bundle(
            out_dir,
            valid.spec.name,
            files,
            force=force,
            executable=executable(files),
            note=lambda text: typer.echo(printable(text), err=True),
        )
    except WriteError as err:
        fail(EXIT_BAD_INPUT, str(err))
    top = sorted({name.split("/", 1)[0] + ("/" if "/" in name else "") for name in files})
    typer.echo(f"wrote {printable(str(target))} ({choice.name}): {', '.join(top)}")


@app.command()
def explain(
    spec: Path = typer.Argument(
        ..., metavar="SPEC", help="Spec file (YAML).", show_default=False, readable=False
    ),
    backend: Optional[str] = backend_option(),
    format: str = format_option(),
) -> None:
    """For every spec field, what it became in each layer (Hydra key, env var, engine flag, patch) and why."""

    from fp8spec.compiler.build import build_settings_plan
    from fp8spec.compiler.explain import explain_data, explain_text

    check_format(format)
    validation, choice = validated(spec, backend)
    valid = validation.valid()
    plan = build_settings_plan(valid, choice)
    if format == "json":
        typer.echo(json.dumps(explain_data(valid, plan), indent=2, sort_keys=True))
        return
    typer.echo(explain_text(valid, plan), nl=False)


app.command()(diff)


app.command()(init)


app.command()(plan)


app.command()(report)


@app.command()
def models() -> None:
    """List the model catalog."""
    from fp8spec.catalog import catalog_ids, get_model

    for model_id in catalog_ids():
        m = get_model(model_id)
        kind = f"MoE {m.num_experts} experts" if m.is_moe else "dense"
        typer.echo(f"{model_id:<36} {m.architecture:<30} {m.num_hidden_layers:>3} layers  {kind}")


app.add_typer(backends_app, name="backends", help="Backend releases: wheel snapshots, drift report.")


# Every command with a --format option (tests/cli/test_json_failures.py holds this to the command tree).
JSON_COMMANDS = frozenset({"validate", "plan", "explain", "diff", "rules", "list", "check", "report"})


def _wants_json(argv: list[str]) -> bool:
    """Whether this command line asked a command with --format (JSON_COMMANDS) for JSON: then every failure,
    usage and internal errors included, prints exactly one JSON document on stdout."""
    if not JSON_COMMANDS & set(argv):
        return False
    for i, arg in enumerate(argv):
        if arg in ("--format", "-f") and argv[i + 1 : i + 2] == ["json"]:
            return True
        if arg in ("--format=json", "-fjson"):
            return True
    return False


_json_failure = json_failure
# Writing the output failed: a full disk (> /dev/full), a file too large, an I/O error, a closed pipe.
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EPIPE}


def _output_failed(err: OSError) -> NoReturn:
    """stdout cannot be written: say so on stderr (no traceback, not even at exit) and exit 2."""
    try:  # what is still buffered for stdout goes nowhere, so the interpreter's last flush cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    if err.errno != errno.EPIPE:  # a reader that stopped reading (| head) needs no message
        typer.echo(f"fp8spec: error: cannot write the output: {err.strerror or err}", err=True)
    os._exit(EXIT_BAD_INPUT)


class _GuardedStderr:
    """stderr that never fails the command: when it cannot be written (2>/dev/full, a full log disk, a closed
    pipe) the message is lost, not the exit code; the descriptor then goes to /dev/null so that nothing
    buffered fails again at exit. stdout is the command's output: its failure is exit 2 (_output_failed)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._lost()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._lost()

    def _lost(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # not a file (a test's buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _out_of_memory(exc: BaseException) -> bool:
    """A memory limit (ulimit -v, a cgroup) stopped fp8spec: a MemoryError, or a library that could not be
    mapped into memory while it was imported."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, SystemError):  # a C extension whose allocation failed without setting MemoryError
        return _cannot_allocate()
    text = str(exc)
    return isinstance(exc, (ImportError, OSError)) and (
        "failed to map segment" in text
        or "Cannot allocate memory" in text
        or getattr(exc, "errno", 0) == errno.ENOMEM
    )


def _cannot_allocate(probe: int = 64 << 20) -> bool:
    """Whether this process cannot take ``probe`` more bytes now (a fleeting allocation, freed at once)."""
    try:
        bytearray(probe)
    except MemoryError:
        return True
    return False


def _no_memory(as_json: bool) -> NoReturn:
    message = "out of memory: a memory limit (ulimit -v, a container's) is too low for this command"
    if as_json:
        _json_failure("resource", message)
    typer.echo(f"fp8spec: error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def main() -> None:
    """Console entry point: users see one-line errors, never tracebacks (FP8SPEC_DEBUG=1 shows them)."""
    stderr = sys.stderr
    sys.stderr = _GuardedStderr(stderr)
    try:
        _main()
    finally:
        sys.stderr = stderr


def _main() -> None:
    as_json = _wants_json(sys.argv[1:])
    JSON_OUTPUT["on"] = as_json
    try:
        if os.environ.get(COMPLETE_VAR):
            register_shells()
        code = app(standalone_mode=False, prog_name="fp8spec")  # the same name however it is started
        _flush_stdout()
        sys.exit(code if isinstance(code, int) else EXIT_OK)
    except typer.Exit as exc:
        _flush_stdout()
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        _flush_stdout()
        sys.exit(exc.code)
    except MemoryError:
        _no_memory(as_json)
    except OSError as exc:
        if exc.errno in _OUTPUT_ERRNOS and _stdout_broken():
            _output_failed(exc)
        if _out_of_memory(exc):
            _no_memory(as_json)
        _internal(exc, as_json)
    except KeyboardInterrupt:
        typer.echo("fp8spec: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # click usage errors and anything unexpected
        # Typer may vendor its own click, so recognise click's exceptions by shape, not by class.
        if callable(getattr(exc, "show", None)) and hasattr(exc, "exit_code"):
            usage: Any = exc
            if as_json and callable(getattr(exc, "format_message", None)):
                _json_failure("usage", usage.format_message())
            usage.show()
            sys.exit(EXIT_BAD_INPUT)
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        if _out_of_memory(exc):
            _no_memory(as_json)
        _internal(exc, as_json)


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except OSError as err:
        _output_failed(err)


def _stdout_broken() -> bool:
    """Whether stdout itself cannot take more output (the error came from writing it, not from a file)."""
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), b"")
    except OSError:
        return True
    except ValueError:
        return False
    return False


def _internal(exc: BaseException, as_json: bool) -> NoReturn:
    if os.environ.get("FP8SPEC_DEBUG"):
        raise exc
    message = f"internal error: {type(exc).__name__}: {exc} (set FP8SPEC_DEBUG=1 for details)"
    if as_json:
        _json_failure("internal", message)
    typer.echo(f"fp8spec: {message}", err=True)
    sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
