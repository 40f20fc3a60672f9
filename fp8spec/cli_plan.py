"""`fp8spec plan`: per-GPU memory, KV capacity and what FP8 buys."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from fp8spec.cli_options import (
    backend_option,
    check_format,
    fail,
    format_option,
    output_folder,
    usage_error,
    validate_on_backend,
)
from fp8spec.diagnostics import EXIT_BAD_INPUT, EXIT_RULE_ERRORS, printable, summary_line
from fp8spec.diagnostics import render_json as render_diagnostics_json


def _complete_gpu(incomplete: str) -> list[str]:
    return [name for name in _gpu_names() if name.startswith(incomplete)]


def _gpu_names() -> list[str]:
    from fp8spec.hardware import gpu_table

    return list(gpu_table())


def _number_between(low: float, high: float):
    """A float option's check: the range, and NaN named as not a number (a range check alone would say that
    nan is above the upper bound)."""

    def check(value: Optional[float]) -> Optional[float]:
        if value is None:
            return None
        if math.isnan(value):
            raise typer.BadParameter("is not a number")
        if not low <= value <= high:
            raise typer.BadParameter(f"{value:g} is not in the range {low:g} to {high:g}")
        return value

    return check


def plan(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file (YAML).", show_default=False),
    format: str = format_option(),
    output: Optional[str] = typer.Option(
        None,
        "--output",
        "-o",
        metavar="DIR",
        help="Also write plan.svg and plan.png (needs matplotlib: pip install 'fp8spec[plot]'; without it "
        "only plan.svg) into this folder.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="With -o: replace a plan.png or plan.svg that fp8spec did not draw (its own are replaced without "
        "it; links and special files never).",
    ),
    backend: Optional[str] = backend_option(),
    gpu: Optional[str] = typer.Option(
        None,
        "--gpu",
        metavar="NAME",
        autocompletion=_complete_gpu,
        help="Plan for this GPU instead of hardware.gpu (every rule checks it too); its memory as CUDA "
        "reports it, from fp8spec/data/gpu_memory.yaml.",
    ),
    gpu_memory_gib: Optional[float] = typer.Option(
        None,
        "--gpu-memory-gib",
        callback=_number_between(1.0, 4096.0),
        metavar="GIB",
        help="GPU memory as CUDA reports it (default: recorded for hardware.gpu).",
    ),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None,
        "--gpu-memory-utilization",
        callback=_number_between(0.01, 1.0),
        metavar="FRACTION",
        help="Default: rollout.gpu_memory_utilization.",
    ),
    tp: Optional[int] = typer.Option(
        None, "--tp", min=1, max=1024, metavar="N", help="Rollout tensor parallel size."
    ),
    ep: Optional[int] = typer.Option(
        None, "--ep", min=1, max=1024, metavar="N", help="Rollout expert parallel size."
    ),
    max_num_batched_tokens: Optional[int] = typer.Option(
        None,
        "--max-num-batched-tokens",
        min=1,
        max=10_000_000,
        metavar="N",
        help="Default: the spec's rollout.max_num_batched_tokens, else verl's 8192.",
    ),
    max_num_seqs: Optional[int] = typer.Option(
        None,
        "--max-num-seqs",
        min=1,
        max=1_000_000,
        metavar="N",
        help="Default: the spec's rollout.max_num_seqs, else verl's 256.",
    ),
    max_model_len: Optional[int] = typer.Option(
        None,
        "--max-model-len",
        min=1,
        max=100_000_000,
        metavar="N",
        help="Default: the spec's rollout.max_model_len, else the model's max_position_embeddings (what verl passes).",
    ),
    cuda_graphs: Optional[bool] = typer.Option(
        None, "--cuda-graphs/--no-cuda-graphs", help="Default: on (verl's enforce_eager false)."
    ),
) -> None:
    """Per-GPU memory, KV capacity and what FP8 buys, for BF16 and the spec's FP8 choices (exit 1 if the
    spec has errors; the plan is still printed, files are not written)."""
    from fp8spec.plan import Overrides, PlanInputError, build_memory_plan
    from fp8spec.plan.render import render_json, render_text
    from fp8spec.rules.plan_columns import judged
    from fp8spec.rules.plan_layout import LayoutInputError, layout_changes, layout_errors

    check_format(format)
    out_dir = output_folder(output) if output is not None else None
    if gpu is not None:
        gpu = gpu.strip().lower()
        if gpu not in _gpu_names():
            usage_error(f"--gpu {gpu!r} is not a GPU fp8spec knows; choose one of {', '.join(_gpu_names())}")
    validation, _ = validate_on_backend(spec, backend, gpu)
    ctx = validation.context
    if ctx is None or ctx.model is None or ctx.profile("verl") is None:
        if format == "json":
            typer.echo(render_diagnostics_json({str(spec): validation.diagnostics}))
        for d in validation.diagnostics:
            typer.echo(d.render(), err=True)
        typer.echo(
            f"{spec}: {summary_line(validation.diagnostics)}; no plan without a valid spec, model and "
            "verl profile",
            err=True,
        )
        raise typer.Exit(EXIT_RULE_ERRORS)
    overrides = Overrides(
        gpu_memory_gib,
        gpu_memory_utilization,
        tp,
        ep,
        max_num_batched_tokens,
        max_num_seqs,
        max_model_len,
        cuda_graphs,
    )
    try:
        result = judged(build_memory_plan(ctx, overrides), ctx)
        if not validation.errors:  # a spec with errors of its own gets no verdict on a variant of it
            result = replace(result, layout_errors=layout_errors(ctx, overrides))
    except (PlanInputError, LayoutInputError) as err:
        fail(EXIT_BAD_INPUT, f"{spec}: {err}")
    failure = None
    notes: list[str] = []
    if out_dir is not None and not validation.errors and not result.layout_errors:
        failure, notes = _write_plan_pictures(result, out_dir, force)
    if format == "json":
        text = render_json(result)
        if failure is not None or validation.errors:  # one JSON document: the plan, with what went wrong
            data = json.loads(text)
            if validation.errors:  # as `validate -f json` reports them
                data.update(json.loads(render_diagnostics_json({str(spec): validation.diagnostics})))
            if failure is not None:
                data["error"] = {"kind": "usage", "message": printable(failure)}
            text = json.dumps(data, indent=2, sort_keys=True)
        typer.echo(text)
    else:
        typer.echo(render_text(result), nl=False)
    for d in validation.diagnostics:
        typer.echo(d.render(), err=True)
    for note in notes:
        typer.echo(note, err=True)
    if validation.errors:
        typer.echo(f"{spec}: {summary_line(validation.diagnostics)}; nothing written", err=True)
        raise typer.Exit(EXIT_RULE_ERRORS)
    if result.layout_errors:
        asked = ", ".join(f"{k} {v}" for k, v in layout_changes(ctx, overrides).items())
        typer.echo(
            f"{spec}: the layout asked about ({asked}) is refused by "
            f"{', '.join(sorted({e.code for e in result.layout_errors}))}; nothing written",
            err=True,
        )
        raise typer.Exit(EXIT_RULE_ERRORS)
    if failure is not None:
        typer.echo(f"fp8spec: error: {printable(failure)}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)


def _write_plan_pictures(result: Any, output: Path, force: bool) -> tuple[Optional[str], list[str]]:
    """Write plan.png and plan.svg (fp8spec.plan.pictures decides which) into ``output``, both or neither;
    returns why they were not written (None when they were) and notes for the user."""
    from fp8spec.plan.pictures import picture_targets
    from fp8spec.safe_write import WriteError, prepare_folder, remove_created, write_files

    created = None
    try:
        created = prepare_folder(output)
        targets, left_out = picture_targets(result, output, force)
        written = write_files(targets)
    except WriteError as err:
        remove_created(created, output)
        return f"{err}; no picture written", []
    except BaseException:
        remove_created(created, output)
        raise
    notes = [f"fp8spec: note: {note}" for note in left_out]
    for target, new in zip(targets, written):
        name = printable(str(target.path))
        notes.append(f"wrote {name}" if new else f"{name} unchanged: it holds this content")
    return None, notes
