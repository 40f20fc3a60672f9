"""The habits CI keeps: the package, its tests and the benchmarks pass ruff (the rule set in pyproject.toml), and
the package is ruff-formatted and type-checks with mypy (pyproject.toml [tool.mypy]). They run here, inside the
suite, so `.ci/run` stays the README's test command. The tools are pinned in the test extra, so a new release
cannot fail CI on its own.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _tool(name: str) -> list[str]:
    """The tool from this interpreter's environment (the test extra installs it)."""
    try:
        __import__(name)
    except ImportError:
        pytest.fail(f"{name} is not installed: pip install '.[test]'")
    return [sys.executable, "-m", name]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_check():
    proc = _run([*_tool("ruff"), "check", "--no-cache", "fp8spec", "tests", "benchmarks"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = _run([*_tool("ruff"), "format", "--check", "--no-cache", "fp8spec"])
    assert proc.returncode == 0, proc.stdout + proc.stderr



def _mypy_home(tmp_path_factory) -> Path:
    """mypy's incremental cache and the file the teeth check uses: in pytest's temporary root, beside the numbered run
    folders pytest rotates, so the cache outlives a run (a warm run re-checks only what changed; a fresh machine, as
    in CI, checks everything) and never lands in the checkout. One per checkout, so two worktrees do not overwrite
    each other's entries. The teeth file keeps one path: mypy's cache reports a cached module's errors at the
    path it was first checked at."""
    base = tmp_path_factory.getbasetemp()
    root = next((p for p in (base, *base.parents) if p.name.startswith("pytest-of-")), base)  # else --basetemp
    home = root / f"fp8spec-mypy-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}"
    home.mkdir(exist_ok=True)
    return home


def test_mypy(tmp_path_factory):
    """One mypy run (one start, one cache, one pass over the third-party modules the package imports) does both
    jobs: the package ([tool.mypy] files) type-checks clean, and a file that breaks a rule fails beside it (so a
    clean package means something)."""
    home = _mypy_home(tmp_path_factory)
    bad = home / "fp8spec_mypy_teeth.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n", encoding="utf-8")
    proc = _run([*_tool("mypy"), "--cache-dir", str(home / "cache"), "--config-file", str(REPO / "pyproject.toml"),
                 "fp8spec", str(bad)])
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert errors and all(line.startswith(f"{bad}:") for line in errors), proc.stdout  # the package: none
    assert any("Incompatible return value" in line for line in errors), proc.stdout


def test_the_checks_have_teeth(tmp_path):
    """Each tool fails on a file that breaks its rule (so a passing run above means something; mypy's teeth are
    in test_mypy, whose one run checks the package and a bad file together)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\ndef f(x: int) -> str:\n    return x\n", encoding="utf-8")
    config = ["--config", str(REPO / "pyproject.toml")]
    assert _run([*_tool("ruff"), "check", "--no-cache", *config, str(bad)]).returncode == 1  # F401
    assert _run([*_tool("ruff"), "format", "--check", "--no-cache", *config, str(bad)]).returncode == 1


def test_py_typed_is_shipped():
    """The package says it is typed (PEP 561), so mypy checks code that uses it against its annotations."""
    assert (REPO / "fp8spec" / "py.typed").is_file()
