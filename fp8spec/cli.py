"""The fp8spec command line.

Exit codes: 0 clean (warnings allowed unless --strict), 1 the spec has errors (schema or rules; with
--strict, warnings too), 2 unreadable or malformed input or bad usage, 3 an internal error (a bug).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from fp8spec import __version__
from fp8spec.cli_backends import backends_app
from fp8spec.cli_init import init
from fp8spec.targets import BACKENDS
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
    "launch bundles for verl. Exit codes: 0 ok, 1 spec errors, 2 bad input or usage, 3 internal error.",
    no_args_is_help=True,
    add_completion=True,
    # Plain help: flags render as flags ('--strict', not '--strict <bool>') with every typer release allowed.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

BACKEND_HELP = (f"{', '.join(BACKENDS[:-2])} (a verl run), or {' / '.join(BACKENDS[-2:])} (a "
                "standalone server for evaluation). Default: the spec's training.backend + rollout.engine; "
                "another backend retargets the spec: every rule checks it as if it said so.")


def _complete_backend(incomplete: str) -> list[str]:
    return [b for b in BACKENDS if b.startswith(incomplete)]


def _complete_code(incomplete: str) -> list[str]:
    from fp8spec.rules.registry import all_rules
    from fp8spec.spec.codes import input_codes

    codes = [r.code for r in all_rules()] + list(input_codes())
    return [c for c in codes if c.startswith(incomplete.upper())]


def _complete_format(incomplete: str) -> list[str]:
    return [f for f in ("text", "json") if f.startswith(incomplete)]


def _backend_option(help_text: str = BACKEND_HELP):
    return typer.Option(None, "--backend", "-b", metavar="BACKEND", help=help_text,
                        autocompletion=_complete_backend)


def _format_option():
    return typer.Option("text", "--format", "-f", metavar="[text|json]", help="Output format.",
                        autocompletion=_complete_format)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"fp8spec {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """fp8spec command line."""


@app.command()
def validate(
    specs: List[Path] = typer.Argument(..., metavar="SPEC", help="Spec files (YAML).", show_default=False,
                                       readable=False),
    format: str = _format_option(),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors (exit 1)."),
    backend: Optional[str] = _backend_option(),
) -> None:
    """Check specs: every mistake at once, each located like a compiler error, with the reason and the fix."""
    from fp8spec.compiler.build import BackendChoiceError, retarget_note, validate_for
    from fp8spec.spec.loader import InputError

    if format not in ("text", "json"):
        _usage_error(f"--format must be text or json, not {format!r}")
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
            _usage_error(str(err))
        except InputError as err:
            diags = [_flag_value_hint(err.diagnostic, path)]
            exit_code = max(exit_code, EXIT_BAD_INPUT)
        results[display] = diags
        if any(d.severity == "error" for d in diags) or (strict and any(d.severity == "warning" for d in diags)):
            exit_code = max(exit_code, EXIT_RULE_ERRORS)
    if format == "json":
        extra = ({f: {"backend": backend, "retargeted": notes.get(f, "")} for f in results}
                 if backend else None)
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


@app.command()
def schema(
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE",
                                          help="Write the JSON Schema to this file.", readable=False),
    docs: Optional[Path] = typer.Option(None, "--docs", metavar="FILE", readable=False,
                                        help="Write the field reference (Markdown) to this file instead, "
                                        "e.g. docs/spec.md."),
) -> None:
    """Print the spec's JSON Schema (editors use it through the '# yaml-language-server: $schema=' line), or
    write the field reference generated from it."""
    if docs is not None:
        from fp8spec.spec.reference import reference_markdown

        _write_text(docs, reference_markdown())
        return
    from fp8spec.spec.schema import schema_text

    text = schema_text()
    if output is None:
        typer.echo(text, nl=False)
        return
    _write_text(output, text)


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        _fail(EXIT_BAD_INPUT, f"{path}: cannot write: {err.strerror or err}")
    typer.echo(f"wrote {printable(str(path))}")


@app.command()
def rules(code: Optional[str] = typer.Argument(
        None, metavar="CODE", autocompletion=_complete_code,
        help="A code fp8spec printed (BLK001, S002, E003, ...) to explain.")) -> None:
    """List the rules and the reader's and schema's codes, or explain one code."""
    from fp8spec.rules.registry import all_rules, get_rule
    from fp8spec.spec.codes import input_code, input_codes

    if code is None:
        for r in all_rules():
            ack = " (acknowledgeable)" if r.acknowledgeable else ""
            typer.echo(f"{r.code:<6}  {r.severity:<7}  {r.name:<34} {r.summary}{ack}")
        typer.echo("")
        for c in input_codes().values():
            typer.echo(f"{c.code:<6}  {'error':<7}  {c.name:<34} {c.summary} (exit {c.exit_code})")
        return
    r = get_rule(code)
    if r is not None:
        typer.echo(f"{r.code} {r.name} ({r.severity}{', acknowledgeable' if r.acknowledgeable else ''})\n")
        typer.echo(f"{r.summary}\n")
        typer.echo(f"Why: {r.rationale}\n")
        typer.echo(f"Fix: {r.hint}")
        return
    c = input_code(code)
    if c is None:
        _fail(EXIT_BAD_INPUT, f"no rule or code {code!r}; `fp8spec rules` lists them")
    typer.echo(f"{c.code} {c.name} (error: {c.kind}, exit {c.exit_code})\n")
    typer.echo(f"{c.summary}\n")
    typer.echo(f"Why: {c.why}\n")
    typer.echo(f"Fix: {c.fix}")


def _validated(spec: Path, backend: Optional[str]):
    """Validate a spec for compile/explain/diff (retargeted to ``backend``): errors print located diagnostics
    and exit non-zero."""
    from fp8spec.compiler.build import BackendChoiceError, retarget_note, validate_for
    from fp8spec.spec.loader import InputError

    try:
        validation, choice = validate_for(spec, str(spec), backend)
    except BackendChoiceError as err:
        _fail(EXIT_BAD_INPUT, str(err))
    except InputError as err:
        typer.echo(err.diagnostic.render(), err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    note = retarget_note(validation, choice)
    if note:
        typer.echo(f"{printable(str(spec))}: {note}", err=True)
    if validation.errors:
        for d in validation.diagnostics:
            typer.echo(d.render(), err=True)
        summary = summary_line(validation.diagnostics)
        typer.echo(f"{printable(str(spec))}: {summary}; nothing written", err=True)
        raise typer.Exit(EXIT_RULE_ERRORS)
    return validation, choice


@app.command()
def compile(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file (YAML).", show_default=False,
                                readable=False),
    backend: Optional[str] = _backend_option(),
    output: Path = typer.Option(Path("bundles"), "--output", "-o", metavar="DIR",
                                help="Folder that receives the bundle folder.", readable=False),
    force: bool = typer.Option(False, "--force", help="Replace an existing bundle of the same name."),
) -> None:
    """Validate SPEC, then write its launch bundle (a folder named after the spec) into OUTPUT."""
    from fp8spec.compiler.build import build_plan
    from fp8spec.compiler.bundle import bundle_files
    from fp8spec.compiler.writer import WriteError, write_bundle

    validation, choice = _validated(spec, backend)
    for d in validation.diagnostics:
        typer.echo(d.render(), err=True)
    valid = validation.valid()
    plan = build_plan(valid, choice)
    files = bundle_files(valid, choice, plan, printable(str(spec)))  # the name is shown in README.md
    try:
        target = write_bundle(output, valid.spec.name, files, force=force)
    except WriteError as err:
        _fail(EXIT_BAD_INPUT, str(err))
    top = sorted({name.split("/", 1)[0] + ("/" if "/" in name else "") for name in files})
    typer.echo(f"wrote {printable(str(target))} ({choice.name}): {', '.join(top)}")


@app.command()
def explain(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file (YAML).", show_default=False,
                                readable=False),
    backend: Optional[str] = _backend_option(),
) -> None:
    """For every spec field, what it became in each layer (Hydra key, env var, engine flag, patch) and why."""
    from fp8spec.compiler.build import build_plan
    from fp8spec.compiler.explain import explain_text

    validation, choice = _validated(spec, backend)
    valid = validation.valid()
    typer.echo(explain_text(valid, build_plan(valid, choice)), nl=False)


@app.command()
def diff(
    specs: List[Path] = typer.Argument(..., metavar="SPEC", show_default=False, readable=False,
                                       help="Two specs, or one spec with two --backend."),
    backends: Optional[List[str]] = typer.Option(
        None, "--backend", "-b", metavar="BACKEND", autocompletion=_complete_backend,
        help="Without it each spec is compiled for its own backend. Once: both specs retargeted to it. "
        "Twice: the first spec for the first backend, the second (or the same) spec for the second."),
) -> None:
    """The difference between two compiled configurations: two specs, or one spec on two backends (exit 0
    either way)."""
    from fp8spec.compiler.build import build_plan
    from fp8spec.compiler.explain import diff_text

    backends = list(backends or [])
    if len(specs) > 2 or len(backends) > 2 or len(specs) + len(backends) < 3 and len(specs) < 2:
        _usage_error("diff compares two specs (each on its own backend, or both on one --backend), or one "
                     "spec on two: fp8spec diff SPEC --backend A --backend B")
    pairs = [(specs[0], backends[0] if backends else None),
             (specs[-1], backends[-1] if backends else None)]
    sides = []
    for path, backend in pairs:
        validation, choice = _validated(path, backend)
        valid = validation.valid()
        label = choice.name
        if valid.retargeted:
            label += f", retargeted from {valid.spec_backend}"
        sides.append((build_plan(valid, choice), f"{printable(str(path))} ({label})"))
    typer.echo(diff_text(sides[0][0], sides[1][0], sides[0][1], sides[1][1]), nl=False)


app.command()(init)


@app.command()
def plan(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file (YAML).", show_default=False),
    format: str = _format_option(),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", metavar="DIR", help="Also write plan.png (needs matplotlib: pip install "
        "'fp8spec[plot]') and plan.svg into this folder."),
    backend: Optional[str] = _backend_option(),
    gpu_memory_gib: Optional[float] = typer.Option(
        None, "--gpu-memory-gib", min=1.0, max=4096.0, metavar="GIB", help="GPU memory as CUDA reports it "
        "(default: recorded for hardware.gpu)."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, "--gpu-memory-utilization", min=0.01, max=1.0, metavar="FRACTION",
        help="Default: rollout.gpu_memory_utilization."),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, max=1024, metavar="N",
                                     help="Rollout tensor parallel size."),
    ep: Optional[int] = typer.Option(None, "--ep", min=1, max=1024, metavar="N",
                                     help="Rollout expert parallel size."),
    max_num_batched_tokens: Optional[int] = typer.Option(
        None, "--max-num-batched-tokens", min=1, max=10_000_000, metavar="N",
        help="Default: verl's rollout default."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", min=1, max=1_000_000, metavar="N",
                                               help="Default: verl's rollout default."),
    max_model_len: Optional[int] = typer.Option(
        None, "--max-model-len", min=1, max=100_000_000, metavar="N",
        help="Default: the model's max_position_embeddings (what verl passes)."),
    cuda_graphs: Optional[bool] = typer.Option(None, "--cuda-graphs/--no-cuda-graphs",
                                               help="Default: on (verl's enforce_eager false)."),
) -> None:
    """Per-GPU memory, KV capacity and what FP8 buys, for BF16 and the spec's FP8 choices (exit 1 if the
    spec has errors; the plan is still printed, files are not written)."""
    from fp8spec.compiler.build import BackendChoiceError, retarget_note, validate_for
    from fp8spec.plan import Overrides, PlanInputError, build_plan
    from fp8spec.plan.render import render_json, render_text
    from fp8spec.spec.loader import InputError

    if format not in ("text", "json"):
        _usage_error(f"--format must be text or json, not {format!r}")
    try:
        validation, choice = validate_for(spec, str(spec), backend)
    except BackendChoiceError as err:
        _fail(EXIT_BAD_INPUT, str(err))
    except InputError as err:
        typer.echo(err.diagnostic.render(), err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    if validation.retargeted:
        typer.echo(f"{printable(str(spec))}: {retarget_note(validation, choice)}", err=True)
    ctx = validation.context
    if ctx is None or ctx.model is None or ctx.profile("verl") is None:
        for d in validation.diagnostics:
            typer.echo(d.render(), err=True)
        typer.echo(f"{spec}: {summary_line(validation.diagnostics)}; no plan without a valid spec, model and "
                   "verl profile", err=True)
        raise typer.Exit(EXIT_RULE_ERRORS)
    overrides = Overrides(gpu_memory_gib, gpu_memory_utilization, tp, ep, max_num_batched_tokens, max_num_seqs,
                          max_model_len, cuda_graphs)
    try:
        result = build_plan(ctx, overrides)
    except PlanInputError as err:
        _fail(EXIT_BAD_INPUT, f"{spec}: {err}")
    typer.echo(render_json(result) if format == "json" else render_text(result), nl=format == "json")
    for d in validation.diagnostics:
        typer.echo(d.render(), err=True)
    if validation.errors:
        typer.echo(f"{spec}: {summary_line(validation.diagnostics)}; nothing written", err=True)
        raise typer.Exit(EXIT_RULE_ERRORS)
    if output is not None:
        _write_plan_pictures(result, output)


def _write_plan_pictures(result, output: Path) -> None:
    from fp8spec.plan.svg import plan_svg

    try:
        from fp8spec.plan.figure import plan_png
    except ImportError:
        _fail(EXIT_BAD_INPUT, "-o needs matplotlib for the PNG: pip install 'fp8spec[plot]'")
    try:
        output.mkdir(parents=True, exist_ok=True)
        png = plan_png(result)
        (output / "plan.png").write_bytes(png)
        (output / "plan.svg").write_text(plan_svg(result), encoding="utf-8")
    except OSError as err:
        _fail(EXIT_BAD_INPUT, f"{output}: cannot write: {err.strerror or err}")
    typer.echo(f"wrote {output / 'plan.png'}, {output / 'plan.svg'}", err=True)


@app.command()
def models() -> None:
    """List the model catalog."""
    from fp8spec.catalog import catalog_ids, get_model

    for model_id in catalog_ids():
        m = get_model(model_id)
        kind = f"MoE {m.num_experts} experts" if m.is_moe else "dense"
        typer.echo(f"{model_id:<36} {m.architecture:<24} {m.num_hidden_layers:>3} layers  {kind}")


app.add_typer(backends_app, name="backends", help="Backend releases: wheel snapshots, drift report.")


def _usage_error(message: str) -> None:
    _fail(EXIT_BAD_INPUT, message)


def _fail(code: int, message: str) -> None:
    typer.echo(f"fp8spec: error: {printable(message)}", err=True)
    raise typer.Exit(code)


def _wants_json(argv: list[str]) -> bool:
    """Whether this command line asked `validate` for JSON: then even usage and internal errors are JSON."""
    if "validate" not in argv:
        return False
    for i, arg in enumerate(argv):
        if arg in ("--format", "-f") and argv[i + 1: i + 2] == ["json"]:
            return True
        if arg in ("--format=json", "-fjson"):
            return True
    return False


def _json_failure(kind: str, message: str) -> None:
    failure = {"error": {"kind": kind, "message": message}, "files": []}
    typer.echo(json.dumps(failure, indent=2, sort_keys=True))


def main() -> None:
    """Console entry point: users see one-line errors, never tracebacks (FP8SPEC_DEBUG=1 shows them)."""
    as_json = _wants_json(sys.argv[1:])
    try:
        code = app(standalone_mode=False, prog_name="fp8spec")  # the same name however it is started
        sys.exit(code if isinstance(code, int) else EXIT_OK)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        sys.exit(exc.code)
    except KeyboardInterrupt:
        typer.echo("fp8spec: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # click usage errors and anything unexpected
        # Typer may vendor its own click, so recognise click's exceptions by shape, not by class.
        if callable(getattr(exc, "show", None)) and hasattr(exc, "exit_code"):
            if as_json and callable(getattr(exc, "format_message", None)):
                _json_failure("usage", exc.format_message())
            exc.show()
            sys.exit(EXIT_BAD_INPUT)
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        if os.environ.get("FP8SPEC_DEBUG"):
            raise
        message = f"internal error: {type(exc).__name__}: {exc} (set FP8SPEC_DEBUG=1 for details)"
        if as_json:
            _json_failure("internal", message)
        typer.echo(f"fp8spec: {message}", err=True)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
