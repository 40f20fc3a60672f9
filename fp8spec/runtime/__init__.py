"""fp8spec runtime patch set: FP8 weight sync and per-step KV-scale calibration for verl + vLLM/SGLang.

Importing this package does nothing unless ``FP8SPEC_RUNTIME_PATCHES`` names patches (comma list,
see ``manifest.PATCHES``). Then it checks the installed verl version and registers import hooks that
patch verl / engine modules when (and only in the processes where) they are imported. Needs torch
(and triton for the fast path) and nothing else; never imports fp8spec modules outside this package.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from fp8spec.runtime.envs import (
    RUNTIME_PATCHES,
    SEND_CAST_BF16,
    check_environment,
)
from fp8spec.runtime.manifest import PATCHES, PATCHSET_NAME, PATCHSET_VERSION

if TYPE_CHECKING:
    from collections.abc import Iterable

__version__ = PATCHSET_VERSION
__all__ = ["PATCHSET_NAME", "PATCHSET_VERSION", "activate", "active_patches", "requested_patches"]

_ACTIVE: set = set()


def requested_patches(value: str | None = None) -> list[str]:
    """Parse a patch list (default: the ``FP8SPEC_RUNTIME_PATCHES`` environment variable)."""
    names = RUNTIME_PATCHES.read() if value is None else RUNTIME_PATCHES.read({RUNTIME_PATCHES.name: value})
    unknown = [p for p in names if p not in PATCHES]
    if unknown:
        raise ValueError(f"{RUNTIME_PATCHES.name}: unknown patch(es) {unknown}; known: {sorted(PATCHES)}")
    return names


def active_patches() -> frozenset:
    return frozenset(_ACTIVE)


def activate(patches: Iterable[str] | None = None) -> frozenset:
    """Install the requested patches' import hooks (idempotent). Returns the active set."""
    names = requested_patches() if patches is None else requested_patches(",".join(patches))
    new = [p for p in names if p not in _ACTIVE]
    if not new:
        return active_patches()
    from fp8spec.runtime import _importhook, log, version_guard

    check_environment(set(new))  # a malformed knob fails here, in every worker, naming the variable
    log.install()

    if version_guard.installed_version("verl") is not None:
        version_guard.require("verl", ",".join(new))
    _ACTIVE.update(new)

    from fp8spec.runtime import verl_patch
    from fp8spec.runtime.settings import QuantSettings

    if "kv_scales" in new:
        _importhook.when_imported(verl_patch.MOD_ENGINE_WORKERS, verl_patch.patch_engine_workers)

        def _vllm_ext(mod):
            version_guard.require("vllm", "kv_scales")
            from fp8spec.runtime.kv_scales.vllm_kv import patch_verl_worker_extension

            patch_verl_worker_extension(mod)

        _importhook.when_imported(verl_patch.MOD_VLLM_EXT, _vllm_ext)

    if "direct_sync" in new:

        def _direct(mod):
            version_guard.require("vllm", "direct_sync")
            from fp8spec.runtime.weight_sync.receiver.direct_sync_hook import patch_worker_extension

            patch_worker_extension(mod)

        _importhook.when_imported(verl_patch.MOD_VLLM_EXT, _direct)

        def _lazy(mod):  # views built only for what verl's loader still takes; before the wrapper below
            from fp8spec.runtime.weight_sync.receiver.lazy_receive import patch_bucket_receiver_lazy

            patch_bucket_receiver_lazy(mod)

        _importhook.when_imported(verl_patch.MOD_BUCKET_TRANSFER, _lazy)
        # the receiver's flat buffer and metadata for each bucket: the direct path reads its input in place
        _importhook.when_imported(
            verl_patch.MOD_BUCKET_TRANSFER,
            functools.partial(verl_patch.patch_bucket_receiver, report=False),
        )

    if "mbridge_compat" in new:
        from fp8spec.runtime.trainer.mbridge_compat import MOD_MBRIDGE_UTIL, patch_mbridge_util

        _importhook.when_imported(MOD_MBRIDGE_UTIL, patch_mbridge_util)

    if "te_extra_state_compat" in new:
        from fp8spec.runtime.trainer.te_extra_state_compat import MOD_MEGATRON_TE, patch_megatron_te

        _importhook.when_imported(MOD_MEGATRON_TE, patch_megatron_te)

    if "te_report" in new:
        _importhook.when_imported(verl_patch.MOD_ENGINE_WORKERS, verl_patch.patch_engine_workers_te_report)

    if "direct_sync" in new:
        # before sync_timing, which wraps the send method it finds
        def _fused(mod):
            version_guard.require("verl", "direct_sync (fused_send)")
            import torch

            from fp8spec.runtime.weight_sync.sender.fused_send import patch_bucket_sender_fused

            patch_bucket_sender_fused(
                mod,
                pipeline=True,
                table=None,
                cast=torch.bfloat16 if SEND_CAST_BF16.read() else None,
                packed=True,
            )

        _importhook.when_imported(verl_patch.MOD_BUCKET_TRANSFER, _fused)

    if {"fast_block_quant", "direct_sync"} & set(new):
        # the trainer's side of each sync in one log line (verl's bucket sender: trainer processes only)
        from fp8spec.runtime.weight_sync.sender.sync_timing import patch_bucket_sender

        _importhook.when_imported(verl_patch.MOD_BUCKET_TRANSFER, patch_bucket_sender)

    if {"fast_block_quant", "ue8m0_scales"} & set(new):

        def _vllm_quant(mod):
            version_guard.require("vllm", "fast_block_quant/ue8m0_scales")
            verl_patch.patch_vllm_quant(mod, QuantSettings.from_env(_ACTIVE))

        def _fp8_utils(mod):
            verl_patch.patch_fp8_utils(mod, QuantSettings.from_env(_ACTIVE))

        _importhook.when_imported(verl_patch.MOD_VLLM_QUANT, _vllm_quant)
        _importhook.when_imported(verl_patch.MOD_FP8_UTILS, _fp8_utils)
    return active_patches()


if RUNTIME_PATCHES.read():
    activate()
