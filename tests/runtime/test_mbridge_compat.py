"""mbridge_compat: mbridge 0.15.1's model builder before and after the patch.

Runs mbridge's own ``get_model`` (mbridge/core/util.py) with megatron-core's parallel state on one CPU process;
the model is a plain torch module built on the meta device, so nothing needs a GPU. The suite's megatron-core
(0.16.1, Python 3.11) still has a deprecated ``encoder_and_decoder`` property; the stack the bundles run
(0.18.2, Python 3.12 only) does not. So mbridge is given the ``ModelType`` of 0.18.2 itself, executed from
``megatron/core/enums.py`` of its wheel (the profiled artifact, hash-pinned, as the snapshot checks fetch it).
Without the patch the builder stops where the H200 run of 2026-12-01 stopped (docs/results.md#rl-runs).
"""

from __future__ import annotations

import importlib
import zipfile
from types import ModuleType

import pytest
import torch

from fp8spec.resources import data_dir
from fp8spec.runtime.trainer.mbridge_compat import patch_mbridge_util
from fp8spec.snapshots.core import artifact_for, read_snapshot
from tests.conftest import require


def model_type_of(version: str):
    """``ModelType`` as megatron-core ``version`` defines it, from the enums.py of its wheel."""
    wheel = artifact_for(read_snapshot(data_dir("backends") / "snapshots" / f"megatron-core-{version}.json"))
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read("megatron/core/enums.py").decode()
    module = ModuleType(f"megatron_core_{version.replace('.', '_')}_enums")
    exec(compile(source, "megatron/core/enums.py", "exec"), module.__dict__)  # noqa: S102 - a released file
    return module.ModelType


@pytest.fixture
def mbridge_util(tmp_path):
    require("megatron.core")
    require("mbridge")
    import torch.distributed as dist
    from megatron.core import parallel_state

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    util = importlib.reload(importlib.import_module("mbridge.core.util"))  # a fresh, unpatched module
    try:
        yield util
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _build(util, model_type=None):
    return util.get_model(
        lambda pre_process, post_process: torch.nn.Linear(4, 4),
        **({"model_type": model_type} if model_type is not None else {}),
        wrap_with_ddp=False,
        bf16=False,
        init_model_with_meta_device=True,
    )


@pytest.mark.parametrize("version", ["0.18.2", "0.19.2"])
def test_mbridge_builds_on_the_profiled_megatron_core_only_with_the_patch(mbridge_util, version):
    model_type = model_type_of(version)
    assert not hasattr(model_type, "encoder_and_decoder")
    mbridge_util.ModelType = model_type  # what ``from megatron.core.models.gpt.gpt_model import ModelType`` gives there
    with pytest.raises(AttributeError, match="encoder_and_decoder"):
        _build(mbridge_util, model_type.encoder_or_decoder)
    assert patch_mbridge_util(mbridge_util) is True
    model = _build(mbridge_util, model_type.encoder_or_decoder)
    assert len(model) == 1 and model[0].model_type is model_type.encoder_or_decoder
    assert mbridge_util.ModelType.encoder_and_decoder not in list(model_type)
    assert patch_mbridge_util(mbridge_util) is False  # already patched: nothing more to do


def test_patch_leaves_a_megatron_core_with_the_member_alone(mbridge_util):
    from megatron.core.enums import ModelType

    if not hasattr(ModelType, "encoder_and_decoder"):
        pytest.skip("the installed megatron-core has no encoder_and_decoder")
    before = mbridge_util.ModelType
    assert patch_mbridge_util(mbridge_util) is False and mbridge_util.ModelType is before
    assert len(_build(mbridge_util)) == 1
