"""A copy of the package and its data, laid out as a source checkout, that a test may extend the way a newcomer
would (a new engine folder, a new launcher module and template), and the real CLI run from that copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def copy_of_the_package(root: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("fp8spec", "backends", "templates", "specs"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    return root


def cli_in(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m fp8spec.cli ARGS`` on the copy's package (PYTHONPATH puts it before any installed fp8spec)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-m", "fp8spec.cli", *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=300)


def package_file_of(tree: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", "import fp8spec; print(fp8spec.__file__)"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=60)
    return proc.stdout.strip()
