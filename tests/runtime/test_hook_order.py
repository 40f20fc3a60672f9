"""The order in which activation registers each patch's installer for one target module.

Several installers wrap the same verl class; each wraps the methods it finds, so the order they run in decides the
wrapping chain (which wrapper is outermost). The expected lists below pin that order per target module."""

import importlib

import pytest

import fp8spec.runtime as rt
from fp8spec.runtime import _importhook, manifest, version_guard

# installer -> (module, attribute) where activation finds it
INSTALLERS = {
    "kv_trainer": ("fp8spec.runtime.verl_patch", "patch_engine_workers"),
    "te_report": ("fp8spec.runtime.verl_patch", "patch_engine_workers_te_report"),
    "kv_vllm_extension": ("fp8spec.runtime.kv_scales.vllm_kv", "patch_verl_worker_extension"),
    "direct_extension": ("fp8spec.runtime.weight_sync.receiver.direct_sync_hook", "patch_worker_extension"),
    "lazy_receive": ("fp8spec.runtime.weight_sync.receiver.lazy_receive", "patch_bucket_receiver_lazy"),
    "flat_receive": ("fp8spec.runtime.weight_sync.receiver.flat_receive", "patch_bucket_receiver"),
    "fused_send": ("fp8spec.runtime.weight_sync.sender.fused_send", "patch_bucket_sender_fused"),
    "sync_timing": ("fp8spec.runtime.weight_sync.sender.sync_timing", "patch_bucket_sender"),
    "vllm_quant": ("fp8spec.runtime.quantization.verl_quant", "patch_vllm_quant"),
    "fp8_utils": ("fp8spec.runtime.quantization.verl_quant", "patch_fp8_utils"),
    "mbridge": ("fp8spec.runtime.trainer.mbridge_compat", "patch_mbridge_util"),
    "te_extra_state": ("fp8spec.runtime.trainer.te_extra_state_compat", "patch_megatron_te"),
    "module_precision": ("fp8spec.runtime.trainer.module_precision", "patch_transformer_config"),
    "replay_poll": ("fp8spec.runtime.trainer.replay_poll", "patch_replay_buffer"),
}

ENGINE_WORKERS = "verl.workers.engine_workers"
VLLM_EXT = "verl.workers.rollout.vllm_rollout.utils"
BUCKETS = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
VLLM_QUANT = "verl.utils.vllm.vllm_quant_utils"
FP8_UTILS = "verl.utils.fp8_utils"
MBRIDGE = "mbridge.core.util"
MEGATRON_TE = "megatron.core.extensions.transformer_engine"
MEGATRON_CONFIG = "megatron.core.transformer.transformer_config"
REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"


def _registered(monkeypatch, patches):
    """target module -> [(installer, versions it checks)], in the order activation registered them."""
    calls: list = []
    for label, (mod, attr) in INSTALLERS.items():
        monkeypatch.setattr(
            importlib.import_module(mod), attr, lambda *a, _l=label, **k: calls.append(_l)
        )
    checked: list = []
    monkeypatch.setattr(version_guard, "installed_version", lambda d: None)
    monkeypatch.setattr(version_guard, "require", lambda dist, patch="": checked.append(dist))
    hooks: list = []
    monkeypatch.setattr(_importhook, "when_imported", lambda name, cb: hooks.append((name, cb)))
    monkeypatch.setattr(rt, "_ACTIVE", set())
    rt.activate(patches)
    order: dict = {}
    for target, cb in hooks:
        calls.clear()
        checked.clear()
        cb(object())
        assert len(calls) == 1, (target, calls)
        order.setdefault(target, []).append((calls[0], tuple(checked)))
    return order


ALL = {
    ENGINE_WORKERS: [("kv_trainer", ()), ("te_report", ())],
    VLLM_EXT: [("kv_vllm_extension", ("vllm",)), ("direct_extension", ("vllm",))],
    BUCKETS: [("lazy_receive", ()), ("flat_receive", ()), ("fused_send", ("verl",)), ("sync_timing", ())],
    VLLM_QUANT: [("vllm_quant", ("vllm",))],
    FP8_UTILS: [("fp8_utils", ())],
    MBRIDGE: [("mbridge", ())],
    MEGATRON_TE: [("te_extra_state", ())],
    MEGATRON_CONFIG: [("module_precision", ())],
    REPLAY_BUFFER: [("replay_poll", ())],
}


def test_every_patch_at_once_registers_in_the_pinned_order(monkeypatch):
    assert _registered(monkeypatch, sorted(manifest.PATCHES)) == ALL


ALONE = {
    "kv_scales": {ENGINE_WORKERS: [("kv_trainer", ())], VLLM_EXT: [("kv_vllm_extension", ("vllm",))]},
    "te_report": {ENGINE_WORKERS: [("te_report", ())]},
    "mbridge_compat": {MBRIDGE: [("mbridge", ())]},
    "te_extra_state_compat": {MEGATRON_TE: [("te_extra_state", ())]},
    "module_precision": {MEGATRON_CONFIG: [("module_precision", ())]},
    "replay_poll": {REPLAY_BUFFER: [("replay_poll", ())]},
    "ue8m0_scales": {VLLM_QUANT: [("vllm_quant", ("vllm",))], FP8_UTILS: [("fp8_utils", ())]},
    "fast_block_quant": {
        VLLM_QUANT: [("vllm_quant", ("vllm",))],
        FP8_UTILS: [("fp8_utils", ())],
    },
    "direct_sync": {
        VLLM_EXT: [("direct_extension", ("vllm",))],
        BUCKETS: [("lazy_receive", ()), ("flat_receive", ()), ("fused_send", ("verl",))],
    },
    # measurement: only where asked for by name, never with the weight-sync patches alone
    "sync_timing": {BUCKETS: [("sync_timing", ())]},
}


@pytest.mark.parametrize("patch", sorted(ALONE))
def test_each_patch_alone_registers_its_own_installers(monkeypatch, patch):
    assert _registered(monkeypatch, [patch]) == ALONE[patch]


def test_the_registration_order_does_not_depend_on_the_requested_order(monkeypatch):
    assert _registered(monkeypatch, sorted(manifest.PATCHES, reverse=True)) == ALL
