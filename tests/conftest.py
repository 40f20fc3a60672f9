"""Shared test helpers: a clean base spec, deep patching, and validating a spec dict through a real file."""

from __future__ import annotations

import copy
import importlib
import io
import os
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from fp8spec.rules.examples import DEEPSEEK_E2E, MEGATRON_FP8, MOE, base_spec  # noqa: F401 (re-exported to the tests)

# Ray >= 2.60 turns token authentication on for a new local cluster (`ray.init()` without an address) and writes
# ~/.ray/auth_token; every later `ray start` on the machine then enables it too, and the loopback heads the tests
# start refuse the bundles' jobs ("Authentication token is missing"). The tests' clusters run without it: set
# here, before any test starts Ray, so every process the suite starts inherits it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"
EXAMPLE_SPECS = sorted(SPECS.glob("*.yaml"))

# The base spec every rule example is a fragment of, and the fragments the rules' examples share (one declaration,
# in the package: `fp8spec rules CODE` prints the examples).
BASE_SPEC = base_spec()


def skip_missing_extra(reason: str, *, allow_module_level: bool = False) -> None:
    """A package of the test extra (or one the README's test command installs) is missing: a skip on a
    contributor's machine, a failure under CI (the runner sets CI), where the extra is installed and a skip
    would hide a broken environment behind a green run. GPU-only skips are not this: they stay skips."""
    if os.environ.get("CI"):
        pytest.fail(f"CI installs the test extra, yet: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def require(module: str, reason: str | None = None):
    """``pytest.importorskip`` for the test extra: the imported module, or skip_missing_extra's skip/failure."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        skip_missing_extra(reason or f"{module} is not importable ({err}); pip install '.[test]'",
                           allow_module_level=True)
        raise  # unreachable: skip and fail raise


def patched(base: dict, *patches: dict) -> dict:
    out = copy.deepcopy(base)
    for patch in patches:
        _merge(out, patch)
    return out


def _merge(into: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def dump_yaml(data: dict) -> str:
    buf = io.StringIO()
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.dump(data, buf)
    return buf.getvalue()


@pytest.fixture
def write_spec(tmp_path):
    def write(data: dict, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(dump_yaml(data), encoding="utf-8")
        return path

    return write


@pytest.fixture
def validate(write_spec):
    from fp8spec.rules.runner import validate_path

    def run(data: dict):
        return validate_path(write_spec(data))

    return run


def pytest_collection_modifyitems(config, items):
    """Every test of one bundle (an example spec compiled for one backend: golden, compose, conformance, launcher
    and plan tests) runs on one xdist worker, which compiles the bundle and composes its verl config once
    (tests/compiler/golden.py and verl_config.py cache them per process) instead of once per worker."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if set(params) != {"spec_path", "backend"} or item.get_closest_marker("xdist_group"):
            continue  # variants (a patch beside them) compile bundles of their own
        item.add_marker(pytest.mark.xdist_group(f"bundle:{Path(params['spec_path']).stem}:{params['backend']}"))
