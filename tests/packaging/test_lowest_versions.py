"""The dependency floors work: fp8spec installed with the lowest version of every runtime dependency that
pyproject.toml allows (constraints-lowest.txt) passes the CLI tests, in a fresh virtual environment.

Slow but bounded: one venv, one pip install (downloads come from pip's cache after the first run), one
pytest run of tests/cli. The issue this guards: typer's floor allowed releases that break with today's click.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv

import pytest

from tests.conftest import REPO

CONSTRAINTS = REPO / "constraints-lowest.txt"
# A byte-for-byte check of the committed JSON Schema: its layout follows the pydantic release that wrote it.
NOT_VERSION_NEUTRAL = ["tests/cli/test_cli.py::test_schema_file_is_current"]


def _floors_in_pyproject() -> dict[str, str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for dep in deps:
        name, floor = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)(,.*)?", dep).group(1, 2)
        floors[_norm(name)] = floor
    return floors


def _pins() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_norm(name)] = version.strip()
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_constraints_pin_every_floor():
    floors = _floors_in_pyproject()
    assert floors and _pins() == floors, "constraints-lowest.txt must pin exactly pyproject's floors"
    assert "rich" not in floors  # never imported by fp8spec


def test_no_dependency_is_unused():
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "fp8spec").rglob("*.py"))
    modules = {"pydantic": "pydantic", "ruamel-yaml": "ruamel.yaml", "typer": "typer", "jinja2": "jinja2"}
    for dep in _floors_in_pyproject():
        assert re.search(rf"^\s*(import|from) {re.escape(modules[dep])}\b", sources, re.M), dep


@pytest.mark.slow
def test_cli_tests_pass_with_the_lowest_versions(tmp_path):
    env_dir = tmp_path / "lowest"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    # without CI: this venv holds the runtime dependencies at their lowest versions and pytest, not the test
    # extra, so a test that needs an extra must skip here (under CI a missing extra fails: tests/conftest.py)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CI")}
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), str(REPO),
                              "pytest"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    show = subprocess.run([str(python), "-c", "import importlib.metadata as m, json, sys; "
                           "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))", *_pins()],
                          capture_output=True, text=True, timeout=60, env=env, check=True)
    import json

    assert {_norm(k): v for k, v in json.loads(show.stdout).items()} == _pins()
    # pyproject's addopts spread the suite over xdist workers; this venv has no xdist and runs one file set
    args = [str(python), "-m", "pytest", "tests/cli", "-q", "-p", "no:cacheprovider", "-x", "-o", "addopts=-ra"]
    for test in NOT_VERSION_NEUTRAL:
        args += ["--deselect", test]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert sys.executable != str(python)
