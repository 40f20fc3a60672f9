"""``fp8spec init``: write a commented starter spec for a model and cluster (fp8spec.starter does the work).

Exit codes as every command: 0 written, 1 no spec of the template validates clean on that hardware (nothing
written), 2 bad usage (unknown template, model or GPU, an existing file without --force).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import List, Optional

import typer

from fp8spec.cli_options import fail, write_outputs
from fp8spec.diagnostics import EXIT_BAD_INPUT, EXIT_RULE_ERRORS, printable
from fp8spec.safe_write import Target, WriteError, check


def _complete_template(incomplete: str) -> list[str]:
    from fp8spec.starter import TEMPLATES

    return [t for t in TEMPLATES if t.startswith(incomplete)]


def _complete_model(incomplete: str) -> list[str]:
    from fp8spec.catalog import catalog_ids

    return [m for m in catalog_ids() if m.startswith(incomplete)]


def _complete_gpu(incomplete: str) -> list[str]:
    from fp8spec.hardware import GPU_NAMES

    return [g for g in GPU_NAMES if g.startswith(incomplete)]


DRAFT = "draft"  # what the diagnostics of an unwritten spec point into: its text, shown with them


def _show_draft_errors(result) -> bool:
    """A rejected draft's findings, located in the draft's own text (quoted line by line), not in a file that
    was never written. Whether any line was quoted."""
    lines = result.text.splitlines()
    noted = {code for code, _ in result.unacknowledged}  # said once, as a note
    quoted = False
    for d in result.validation.diagnostics:
        if d.severity == "info" or (d.severity == "warning" and d.code in noted):
            continue
        typer.echo(dataclasses.replace(d, file=DRAFT).render(), err=True)
        if 1 <= d.line <= len(lines):
            typer.echo(f"    {d.line:>4} | {printable(lines[d.line - 1])}", err=True)
            quoted = True
    return quoted


def init(
    template: str = typer.Option(
        "dense-vllm",
        "--template",
        "-t",
        metavar="TEMPLATE",
        autocompletion=_complete_template,
        help="dense-vllm (FSDP + vLLM, FP8 linears and KV cache), moe-megatron "
        "(Megatron + "
        "vLLM, MoE, end-to-end FP8 training) or sglang (FSDP + SGLang).",
    ),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        "-m",
        metavar="MODEL",
        autocompletion=_complete_model,
        help="A catalog id (`fp8spec models`). Default: the template's.",
    ),
    gpu: Optional[str] = typer.Option(
        None,
        "--gpu",
        metavar="GPU",
        autocompletion=_complete_gpu,
        help="The target GPU (h100, h200, b200, ...). Default: the template's.",
    ),
    nodes: Optional[int] = typer.Option(
        None,
        "--nodes",
        min=1,
        max=4096,
        metavar="N",
        help="Nodes. Default: the template's (1, or 2 for moe-megatron).",
    ),
    gpus_per_node: int = typer.Option(
        8, "--gpus-per-node", min=1, max=64, metavar="N", help="GPUs per node."
    ),
    name: Optional[str] = typer.Option(
        None,
        "--name",
        metavar="NAME",
        help="The spec's name (names the bundle). Default: from model and template.",
    ),
    output: Optional[Path] = typer.Option(
        None,
        "--output",
        "-o",
        metavar="FILE",
        readable=False,
        help="Write the spec to FILE instead of printing it.",
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing FILE."),
    config_path: Optional[Path] = typer.Option(
        None,
        "--config-path",
        metavar="PATH",
        readable=False,
        help="A model outside the catalog: its local Hugging Face folder or config.json (written into the spec "
        "as model.config_path; --model names it, default the config's _name_or_path or its folder).",
    ),
    acknowledge: Optional[List[str]] = typer.Option(
        None,
        "--acknowledge",
        metavar="CODE",
        help="Keep this acknowledgeable warning: init applies no fix for it (it says which it did not apply) and "
        "records the acknowledgement (repeatable); init acknowledges nothing on its own.",
    ),
) -> None:
    """Write a commented starter spec for a model and cluster. Values the template's first guess gets wrong
    for this hardware (a rollout tp, a layout, a memory share) are replaced by ones that pass every rule and
    listed on stderr; the spec is written only if it validates clean."""
    from fp8spec.starter import StarterError, starter_spec

    display = str(output) if output is not None else "spec.yaml"
    if output is not None:  # refuse what cannot be written before the work (the write checks again)
        try:
            if check(Target(output, b"", force)) is not None and not force:
                fail(EXIT_BAD_INPUT, f"{display} already exists; use --force to replace it")
        except WriteError as err:
            fail(EXIT_BAD_INPUT, f"{err}; nothing written")
    try:
        result = starter_spec(
            template,
            model,
            gpu,
            nodes,
            gpus_per_node,
            name,
            printable(display),
            (output.parent if output is not None else Path(".")).resolve(),
            tuple(acknowledge or ()),
            config_path,
        )
    except StarterError as err:
        fail(EXIT_BAD_INPUT, str(err))
    for change in result.changes:
        typer.echo(f"init: {change}", err=True)
    for note in result.kept:  # a proposal init did not apply: it would undo an earlier change
        typer.echo(f"init: note: {note}", err=True)
    for _, note in result.unacknowledged:
        typer.echo(f"init: note: {note}", err=True)
    for note in result.not_acknowledged:
        typer.echo(f"init: note: {note}", err=True)
    if not result.clean:
        quoted = _show_draft_errors(result)
        draft = result.validation.loaded.spec
        # a schema error (a value from the command line or config.json) leaves no hardware section to name
        if draft is None:
            where = "(the draft is not a well-formed spec)"
        else:
            where = f"on {draft.hardware.nodes} x {draft.hardware.gpus_per_node} {draft.hardware.gpu}"
        why = "the draft's lines are quoted above" if quoted else "the notes above say why"
        typer.echo(
            f"init: no {template} spec validates clean {where} for this model; nothing written ({why})",
            err=True,
        )
        raise typer.Exit(EXIT_RULE_ERRORS)
    if output is None:
        typer.echo(result.text, nl=False)
        return
    write_outputs([Target(output, result.text.encode("utf-8"), force)])
