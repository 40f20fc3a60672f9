"""The two- and four-GPU step scripts (benchmarks/offline/run_h200x2.sh, run_h200x4.sh) and their time budgets
(benchmarks/multi_gpu/README.md): every step the header lists is a step of the script and the other way round,
every bundle a script names is one of the specs, an unknown step is refused, and each machine's budget table adds
up to its total, under 30 minutes."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO

OFFLINE = REPO / "benchmarks/offline"
SCRIPTS = {"h200x2": OFFLINE / "run_h200x2.sh", "h200x4": OFFLINE / "run_h200x4.sh"}
SPECS = {p.stem for p in (REPO / "benchmarks/multi_gpu/specs").glob("*.yaml")}
README = REPO / "benchmarks/multi_gpu/README.md"


def _header_steps(text: str, script: str) -> set[str]:
    return set(re.findall(rf"^#\s+bash benchmarks/offline/{script} ([\w-]+)", text, re.M))


def _case_steps(text: str) -> set[str]:
    body = text.split("case $step in", 1)[1]
    return set(re.findall(r"^  ([\w-]+)\)", body, re.M))


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_the_header_lists_exactly_the_scripts_steps(kind):
    script = SCRIPTS[kind]
    text = script.read_text(encoding="utf-8")
    assert _header_steps(text, script.name) == _case_steps(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_the_bundles_a_script_runs_are_the_specs_of_its_machine(kind):
    text = SCRIPTS[kind].read_text(encoding="utf-8")
    named = set(re.findall(r"\b(h200x\d-[\w-]+?)(?=[\s,\"'$>)]|$)", text.split("case $step in", 1)[1]))
    templated = {n for n in named if n.endswith("-")}  # h200x4-30b30l-${1}: a layout filled in at run time
    assert named - templated and named - templated <= SPECS
    assert all(n.startswith(kind) for n in named)
    for prefix in templated:
        assert {s for s in SPECS if s.startswith(prefix)}, prefix
    # every spec of the machine kind is run by its script
    assert {s for s in SPECS if s.startswith(kind)} <= {s for s in SPECS if any(s.startswith(n) for n in named)}


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_an_unknown_step_is_refused_with_exit_2(kind):
    proc = subprocess.run(["bash", str(SCRIPTS[kind]), "no-such-step"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "unknown step no-such-step" in proc.stderr


def _budgets() -> dict[str, tuple[list[float], float]]:
    """README: each budget table (by the bold line above it) -> (its rows' minutes, its total)."""
    out, title, rows = {}, None, []
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("**") and "machine" in line.lower() or line.startswith("**Four GPUs"):
            title, rows = line, []
        elif title and line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            minutes = re.match(r"\**([\d.]+)\**", cells[-1])
            if "**total**" in cells:
                out[title] = (rows, float(minutes.group(1)))
                title = None
            elif minutes:
                rows.append(float(minutes.group(1)))
    return out


def test_each_machines_budget_adds_up_under_30_minutes():
    budgets = _budgets()
    assert len(budgets) == 4  # two-GPU A and B, four-GPU tiny MoE, four-GPU 30B-A3B shape
    for title, (rows, total) in budgets.items():
        assert sum(rows) == pytest.approx(total), title
        assert total <= 27, title  # three minutes or more of margin under the machine's 30
