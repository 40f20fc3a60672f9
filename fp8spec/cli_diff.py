"""`fp8spec diff`: two compiled configurations side by side (two specs, or one spec on two backends)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from fp8spec.cli_options import check_format, complete_backend, format_option, usage_error, validated
from fp8spec.diagnostics import printable


def diff(
    specs: List[Path] = typer.Argument(
        ...,
        metavar="SPEC",
        show_default=False,
        readable=False,
        help="Two specs, or one spec with two --backend.",
    ),
    backends: Optional[List[str]] = typer.Option(
        None,
        "--backend",
        "-b",
        metavar="BACKEND",
        autocompletion=complete_backend,
        help="Without it each spec is compiled for its own backend. Once: both specs retargeted to it. "
        "Twice: the first spec for the first backend, the second (or the same) spec for the second.",
    ),
    format: str = format_option(),
) -> None:
    """The difference between two compiled configurations: two specs, or one spec on two backends (exit 0
    whether they differ or not; 1 when a side does not compile: its errors are printed)."""

    from fp8spec.compiler.build import build_settings_plan
    from fp8spec.compiler.explain import diff_data, diff_text, launcher_settings

    check_format(format)
    backends = list(backends or [])
    if len(specs) > 2 or len(backends) > 2 or len(specs) + len(backends) < 3 and len(specs) < 2:
        usage_error(
            "diff compares two specs (each on its own backend, or both on one --backend), or one "
            "spec on two: fp8spec diff SPEC --backend A --backend B"
        )
    pairs = [(specs[0], backends[0] if backends else None), (specs[-1], backends[-1] if backends else None)]
    sides = []
    for path, backend in pairs:
        target = f" for {backend}" if backend else ""
        validation, choice = validated(
            path, backend, f"it does not compile{target}, so there is nothing to compare"
        )
        valid = validation.valid()
        label = choice.name
        if valid.retargeted:
            label += f", retargeted from {valid.spec_backend}"
        plan = build_settings_plan(valid, choice)
        sides.append((plan, f"{printable(str(path))} ({label})", launcher_settings(valid.spec)))
    (a, name_a, launch_a), (b, name_b, launch_b) = sides
    if format == "json":
        typer.echo(json.dumps(diff_data(a, b, name_a, name_b, launch_a, launch_b), indent=2))
        return
    typer.echo(diff_text(a, b, name_a, name_b, launch_a, launch_b), nl=False)
