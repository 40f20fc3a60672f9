"""The habits CI keeps: the package passes ruff (the rule set in pyproject.toml), is ruff-formatted, and type-checks
with mypy (pyproject.toml [tool.mypy]). They run here, inside the suite, so `.ci/run` stays the README's test
command. The tools are pinned in the test extra, so a new release cannot fail CI on its own.
"""

from __future__ import annotations

import subprocess
import sys

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
    proc = _run([*_tool("ruff"), "check", "--no-cache", "fp8spec", "tests"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = _run([*_tool("ruff"), "format", "--check", "--no-cache", "fp8spec"])
    assert proc.returncode == 0, proc.stdout + proc.stderr



# mypy's incremental cache (git-ignored), one per file set: a warm run re-checks only what changed since the last
# one, a cold run (a fresh checkout) everything. Each test has its own, so two xdist workers never share one.
MYPY_CACHE = REPO / ".mypy_cache"


def test_mypy():
    proc = _run([*_tool("mypy"), "--cache-dir", str(MYPY_CACHE / "package")])  # [tool.mypy] files
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_checks_have_teeth(tmp_path):
    """Each tool fails on a file that breaks its rule (so a passing run above means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\ndef f(x: int) -> str:\n    return x\n", encoding="utf-8")
    config = ["--config", str(REPO / "pyproject.toml")]
    assert _run([*_tool("ruff"), "check", "--no-cache", *config, str(bad)]).returncode == 1  # F401
    assert _run([*_tool("ruff"), "format", "--check", "--no-cache", *config, str(bad)]).returncode == 1
    proc = _run([*_tool("mypy"), "--cache-dir", str(MYPY_CACHE / "teeth"), "--config-file",
                 str(REPO / "pyproject.toml"), str(bad)])
    assert proc.returncode == 1 and "Incompatible return value" in proc.stdout, proc.stdout


def test_py_typed_is_shipped():
    """The package says it is typed (PEP 561), so mypy checks code that uses it against its annotations."""
    assert (REPO / "fp8spec" / "py.typed").is_file()
