"""``fp8spec plan --tp/--ep`` judges the layout it is asked about with the rules, as a spec that wrote it would be
judged: a layout the engines or verl refuse is reported invalid (exit 1), never "fits"."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import SPECS


@pytest.fixture
def folder(tmp_path):
    shutil.copytree(SPECS, tmp_path / "s")
    return tmp_path / "s"


def _written(folder, spec: str, tp: int | None, ep: int | None) -> set[str]:
    """The error codes `validate` reports for the spec with the layout written into it."""
    text = (folder / spec).read_text()
    if tp is not None:
        text = text.replace("  tp: ", f"  tp: {tp}  # was ", 1)
    if ep is not None:
        text = text.replace("rollout:\n", f"rollout:\n  ep: {ep}\n", 1)
    (folder / "written.yaml").write_text(text)
    proc = run_cli_here("validate", str(folder / "written.yaml"), "-f", "json")
    (result,) = json.loads(proc.stdout)["files"]
    return {d["code"] for d in result["diagnostics"] if d["severity"] == "error"}


CASES = [
    ("tiny-qwen3-h200.yaml", ["--tp", "3"], 3, None),
    ("tiny-qwen3-h200.yaml", ["--tp", "1024"], 1024, None),
    ("tiny-qwen3-h200.yaml", ["--tp", "2"], 2, None),
    ("tiny-qwen3-h200.yaml", ["--ep", "7"], None, 7),
    ("qwen3-8b.yaml", ["--tp", "3"], 3, None),
    ("qwen3-8b.yaml", ["--tp", "16"], 16, None),
    ("qwen3-8b.yaml", ["--ep", "3"], None, 3),
]


@pytest.mark.parametrize("spec, args, tp, ep", CASES, ids=[f"{c[0]}{' '.join(c[1])}" for c in CASES])
def test_refused_layout_is_invalid_with_the_rules_codes(folder, spec, args, tp, ep):
    proc = run_cli_here("plan", str(folder / spec), *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = [ln for ln in proc.stdout.splitlines() if ln.startswith("verdict:")]
    assert len(verdict) == 1 and verdict[0].startswith("verdict: invalid layout: "), verdict
    codes = {part.split()[0] for part in verdict[0].removeprefix("verdict: invalid layout: ").split("; ")}
    assert codes == _written(folder, spec, tp, ep)
    assert "nothing written" in proc.stderr and "Traceback" not in proc.stderr
    data = json.loads(run_cli_here("plan", str(folder / spec), *args, "-f", "json").stdout)
    assert data["verdict"].startswith("invalid layout") and {e["code"] for e in data["layout_errors"]} == codes


@pytest.mark.parametrize("spec, args", [
    ("tiny-qwen3-h200.yaml", ["--tp", "1"]),
    ("qwen3-8b.yaml", ["--tp", "4"]),
    ("qwen3-8b.yaml", ["--tp", "8"]),
])
def test_accepted_layout_gets_a_memory_verdict(folder, spec, args):
    proc = run_cli_here("plan", str(folder / spec), *args, "-f", "json")
    data = json.loads(proc.stdout)
    assert data["layout_errors"] == [] and not data["verdict"].startswith("invalid layout")


def test_plan_without_layout_overrides_runs_no_layout_check(folder):
    data = json.loads(run_cli_here("plan", str(folder / "tiny-qwen3-h200.yaml"), "-f", "json").stdout)
    assert data["layout_errors"] == [] and data["verdict"].startswith("fits")
