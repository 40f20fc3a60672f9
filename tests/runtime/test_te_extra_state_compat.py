"""te_extra_state_compat: megatron-core 0.18.2's TEGroupedLinear._split_extra_state on TE's stateless extra state.

The two methods are taken from the profiled megatron-core wheels themselves (megatron/core/extensions/
transformer_engine.py, by name, with ast) and bound to an object holding the attributes they read, since the
class needs TransformerEngine to exist. With TE 2.20's empty extra state (a stateless recipe: blockwise, current
scaling, MXFP8) 0.18.2's own method raises what the H200 run raised at its first checkpoint, 0.19.2's returns one
empty state per GEMM, and the patched 0.18.2 method returns what 0.19.2 returns.
"""

from __future__ import annotations

import ast
import pickle
import zipfile
from types import SimpleNamespace

import pytest
import torch

from fp8spec.resources import data_dir
from fp8spec.runtime.trainer.te_extra_state_compat import split_extra_state_with_stateless_recipes
from fp8spec.snapshots.core import artifact_for, read_snapshot
from tests.conftest import require

NUM_GEMMS = 4


def grouped_linear_methods(version: str) -> dict:
    """``_decode_extra_state`` and ``_split_extra_state`` of TEGroupedLinear in megatron-core ``version``."""
    wheel = artifact_for(read_snapshot(data_dir("backends") / "snapshots" / f"megatron-core-{version}.json"))
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read("megatron/core/extensions/transformer_engine.py").decode()
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "TEGroupedLinear")
    wanted = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("_decode_extra_state", "_split_extra_state")]
    namespace: dict = {"torch": torch, "io": __import__("io"), "is_te_min_version": lambda v: True}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "transformer_engine.py", "exec"), namespace)  # noqa: S102
    return {n.name: namespace[n.name] for n in wanted}


def grouped_linear(methods: dict, split=None) -> SimpleNamespace:
    """What the two methods read of a TEGroupedLinear that ran blockwise FP8."""
    mod = SimpleNamespace(fp8_meta={"fp8_checkpoint": True}, fp8=True, fp8_calibration=False, num_gemms=NUM_GEMMS)
    mod._decode_extra_state = methods["_decode_extra_state"].__get__(mod)
    mod._split_extra_state = (split or methods["_split_extra_state"]).__get__(mod)
    return mod


@pytest.fixture
def stateless_extra_state(monkeypatch):
    """TE 2.20's extra state for a stateless recipe (base.py get_extra_state)."""
    safe_globals = require("megatron.core.safe_globals")
    # _decode_extra_state imports SafeUnpickler before it looks at the state; the suite's megatron-core (0.16.1)
    # has none, and the empty state returns before any unpickling, so any Unpickler class serves the import.
    monkeypatch.setattr(safe_globals, "SafeUnpickler", pickle.Unpickler, raising=False)
    return torch.empty(0, dtype=torch.uint8)


def test_megatron_core_0_18_2_cannot_split_a_stateless_extra_state(stateless_extra_state):
    mod = grouped_linear(grouped_linear_methods("0.18.2"))
    with pytest.raises(TypeError, match="not subscriptable"):
        mod._split_extra_state(stateless_extra_state)


def test_patched_0_18_2_splits_as_0_19_2_does(stateless_extra_state):
    fixed = grouped_linear(grouped_linear_methods("0.19.2"))._split_extra_state(stateless_extra_state)
    old = grouped_linear_methods("0.18.2")
    patched = grouped_linear(old, split_extra_state_with_stateless_recipes(old["_split_extra_state"]))
    ours = patched._split_extra_state(stateless_extra_state)
    assert len(ours) == len(fixed) == NUM_GEMMS
    assert all(t.dtype == torch.uint8 and t.numel() == 0 for t in ours + fixed)


def test_patch_leaves_a_module_without_fp8_to_megatron(stateless_extra_state):
    old = grouped_linear_methods("0.18.2")
    mod = grouped_linear(old, split_extra_state_with_stateless_recipes(old["_split_extra_state"]))
    mod.fp8_meta["fp8_checkpoint"], mod.fp8 = False, False
    assert mod._split_extra_state(stateless_extra_state) == [stateless_extra_state] * NUM_GEMMS
