"""One declaration per runtime environment variable (fp8spec/runtime/envs.py): the settings objects read exactly
the declared variables of their patches, no other runtime module names a variable itself, and every malformed
value fails with the variable's name, in the worker that activates the patches."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from fp8spec.runtime import envs, manifest
from fp8spec.runtime.settings import KVSettings, QuantSettings
from tests.conftest import REPO

RUNTIME = REPO / "fp8spec" / "runtime"


class _Recording(dict):
    def __init__(self, values=()) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def test_the_settings_read_exactly_the_declared_variables():
    env = _Recording()
    KVSettings.from_env(env)
    QuantSettings.from_env(frozenset(("ue8m0_scales", "fast_block_quant")), env)
    declared = {v.name for p in ("kv_scales", "ue8m0_scales", "fast_block_quant") for v in envs.of_patch(p)}
    assert env.read == declared
    assert len(declared) == 6


def test_no_other_runtime_module_names_a_variable():
    """A variable's name is written once, in envs.py; the other modules use its declaration."""
    named = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        if path.name == "envs.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and node.value.startswith("FP8SPEC_") and node.value.isupper()):
                named.setdefault(str(path.relative_to(REPO)), []).append(node.value)
    assert named == {}
    assert "FP8SPEC_RUNTIME_PATCHES" in (RUNTIME / "envs.py").read_text(encoding="utf-8")


def test_the_manifest_derives_from_the_table():
    for patch, info in manifest.PATCHES.items():
        assert info["env"] == {v.name: v.default for v in envs.VARIABLES if v.patch == patch}, patch
    assert manifest.PATCHES["fast_block_quant"]["env_notes"]["FP8SPEC_BLOCK_QUANT_BACKEND"] == "auto | triton | reference"


def test_only_variables_a_bundle_or_a_user_sets_are_read():
    # the compiler sets the first and KV_RECALIBRATE; the rest each have a reason a user sets them (runtime README)
    assert [v.name for v in envs.VARIABLES] == [
        "FP8SPEC_RUNTIME_PATCHES",
        "FP8SPEC_LOG_LEVEL",
        "FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS",
        "FP8SPEC_KV_SCALE_DIVISORS",
        "FP8SPEC_KV_CALIB_PHASES",
        "FP8SPEC_KV_RECALIBRATE",
        "FP8SPEC_UE8M0_RULE",
        "FP8SPEC_BLOCK_QUANT_BACKEND",
        "FP8SPEC_QUANT_CHUNK_MB",
        "FP8SPEC_SEND_CAST_BF16",
        "FP8SPEC_BF16_MODULES",
        "FP8SPEC_REPLAY_POLL_S",
    ]


def test_every_default_parses():
    for v in envs.VARIABLES:
        v.read({})  # no ValueError


BAD = {
    "FP8SPEC_KV_SCALE_DIVISORS": "200,100",
    "FP8SPEC_KV_CALIB_PHASES": "compute_log_prob,rollout",
    "FP8SPEC_KV_RECALIBRATE": "always",
    "FP8SPEC_UE8M0_RULE": "e8m0",
    "FP8SPEC_BLOCK_QUANT_BACKEND": "tritn",
    "FP8SPEC_QUANT_CHUNK_MB": "0",
    "FP8SPEC_SEND_CAST_BF16": "bf16",
    "FP8SPEC_BF16_MODULES": "experts,router",
    "FP8SPEC_REPLAY_POLL_S": "0",
}


def test_every_patch_knob_has_a_bad_value_here():
    assert set(BAD) == {v.name for v in envs.VARIABLES if v.patch}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_malformed_value_names_its_variable(name):
    with pytest.raises(ValueError) as err:
        envs.BY_NAME[name].read({name: BAD[name]})
    assert str(err.value).startswith(f"{name} ") and repr(BAD[name]) in str(err.value)
    assert "\n" not in str(err.value)


def test_block_quant_backend_is_validated():
    ok = QuantSettings.from_env({"fast_block_quant"}, {"FP8SPEC_BLOCK_QUANT_BACKEND": " triton "})
    assert ok.backend == "triton"
    assert QuantSettings.from_env({"ue8m0_scales"}, {}).backend == "reference"  # unset: auto only with fast_block_quant
    with pytest.raises(ValueError, match="FP8SPEC_BLOCK_QUANT_BACKEND must be auto or triton or reference, got 'tritn'"):
        QuantSettings.from_env({"fast_block_quant"}, {"FP8SPEC_BLOCK_QUANT_BACKEND": "tritn"})


def _import_runtime(extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8SPEC_")}
    env.update(extra)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", "import fp8spec.runtime"], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_worker_with_a_bad_backend_fails_at_activation_naming_it():
    """What a Ray worker does (verl imports fp8spec.runtime): the patch set refuses to activate, before any
    engine code runs, with one line naming the variable and its allowed values."""
    bad = _import_runtime({"FP8SPEC_RUNTIME_PATCHES": "fast_block_quant", "FP8SPEC_BLOCK_QUANT_BACKEND": "cuda"})
    assert bad.returncode != 0
    last = bad.stderr.strip().splitlines()[-1]
    assert last == "ValueError: FP8SPEC_BLOCK_QUANT_BACKEND must be auto or triton or reference, got 'cuda'"
    # the same value where the patch that reads it is not active is none of the worker's business
    quiet = _import_runtime({"FP8SPEC_RUNTIME_PATCHES": "kv_scales", "FP8SPEC_BLOCK_QUANT_BACKEND": "cuda",
                             "FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS": "1"})
    assert quiet.returncode == 0, quiet.stderr
