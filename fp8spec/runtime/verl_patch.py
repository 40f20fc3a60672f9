"""verl 0.9.1 hook points of the runtime patches and their installers (run by ``fp8spec.runtime.activate``).

How weights travel in verl 0.9.1 (read in the installed package):

* Trainer: ``ActorRolloutRefWorker.update_weights`` (``verl/workers/engine_workers.py`` line 728)
  takes ``per_tensor_param, peft_config = self.actor.engine.get_per_tensor_param(...)`` — a generator
  of ``(hf_name, bf16 tensor)`` that every trainer rank iterates — and hands it either to
  ``self.rollout.update_weights`` (colocated, "naive") or to ``self.checkpoint_engine.send_weights``.
  Extra ``(name, tensor)`` pairs appended to that generator travel with the weights.
* vLLM rollout: the tensors reach the vLLM worker's ``vLLMColocateWorkerExtension._update_weights``
  in buckets (``verl/workers/rollout/vllm_rollout/utils.py``: ``update_weights_from_ipc`` line 248,
  ``_update_weights`` line 367); with
  ``rollout.quantization=fp8`` the BF16 weights are quantized *there*, per tensor, by
  ``verl.utils.vllm.vllm_quant_utils.quant_weights`` (line 346, ``scaled_fp8_blockwise`` at 392,
  ``<name>_scale_inv`` at 404), called from ``load_quanted_weights`` (line 439).
* SGLang rollout: ``ServerAdapter.update_weights`` (``verl/workers/rollout/sglang_rollout/sglang_rollout.py``
  line 305, quantization at lines 360-370) quantizes in the trainer process with ``FP8QuantizerHelper.quant_weights_by_name``
  (``verl/utils/fp8_utils.py`` line 86), then buckets and posts ``update_weights_from_tensor``.
* Forward passes on the actor: ``ActorRolloutRefWorker.compute_log_prob`` calls
  ``self.actor.infer_batch`` (line 703-706), ``update_actor`` calls ``self.actor.train_mini_batch``
  (line 713-716); ``self.actor.engine.module`` is the HF (FSDP) module or the list of Megatron chunks.

Patches:

* ``kv_scales`` (trainer): after ``init_model`` a ``KVScaleCalibrator`` is attached to the actor
  module, ``infer_batch``/``train_mini_batch`` of that actor instance arm it, and the engine's
  ``get_per_tensor_param`` (instance attribute) appends the all-reduced scales to the weight stream
  (vLLM); for SGLang they are posted after the weight update with the fp8spec custom loader.
* ``kv_scales`` (vLLM worker): ``engines.vllm_kv.patch_verl_worker_extension``.
* ``fast_block_quant`` / ``ue8m0_scales``: ``vllm_quant_utils.quant_weights`` and
  ``FP8QuantizerHelper.quant_weights_by_name`` replaced by bucketed versions that keep verl's own
  weight selection (``_classify_quant_weight`` / ``should_quantize_param``) and output order. In the
  vLLM worker, ``BucketedWeightReceiver`` (``bucketed_weight_transfer.py``) is wrapped so that
  ``quant_weights`` sees each received bucket's flat buffer and metadata and quantizes the bucket with
  one launch through a plan cached by layout (``flat_bucket``); the tensor-list path is the fallback. The
  flat path's per-bucket host overhead is cut by a lean pre-launch path and the compiled kernel's runner
  (docs/results.md#quantization-kernel).

This module holds the installers on verl's trainer worker (``ActorRolloutRefWorker.init_model``); the quantizer
replacements are ``quantization.verl_quant``, the receiver's flat buffer ``weight_sync.receiver.flat_receive``, the
hook table ``hooks`` (which installer runs on which module, in which order).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

from fp8spec.runtime.kv_scales.kv_hooks import attach_kv_calibration
from fp8spec.runtime.targets import (  # noqa: F401  (verl's hook points, named here too)
    MOD_BUCKET_TRANSFER,
    MOD_ENGINE_WORKERS,
    MOD_FP8_UTILS,
    MOD_VLLM_EXT,
    MOD_VLLM_QUANT,
)
from fp8spec.runtime.trainer.te_report import attach_te_report


# ------------------------------------------------------------------------------- kv_scales trainer
def _after_init_model(module: ModuleType, flag: str, attach: Callable[[Any], object]) -> None:
    """Run ``attach(worker)`` after ``ActorRolloutRefWorker.init_model`` (once per ``flag``; keeps verl's dispatch attrs)."""
    cls = module.ActorRolloutRefWorker
    if getattr(cls, flag, False):
        return
    orig = cls.init_model

    @functools.wraps(orig)  # copies verl's @register attribute (MAGIC_ATTR) along with __dict__
    def init_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        attach(self)
        return out

    cls.init_model = init_model
    setattr(cls, flag, True)


def patch_engine_workers(module: ModuleType) -> None:
    """kv_scales, trainer side: attach the q/k/v calibration to the actor after ``init_model``."""
    _after_init_model(module, "_fp8spec_kv_patched", attach_kv_calibration)


def patch_engine_workers_te_report(module: ModuleType) -> None:
    """te_report, trainer side: report which TE modules ran FP8 in the actor's forwards and backwards."""
    _after_init_model(module, "_fp8spec_te_report_patched", attach_te_report)
