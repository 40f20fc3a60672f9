"""vLLM side of ``kv_scales``: write pushed q/k/v scales into the attention layers.

vLLM facts relied on (wheel sources, paths relative to the package root):

* Every ``Attention`` layer holds device buffers ``_q_scale``, ``_k_scale``, ``_v_scale`` (float32,
  0-d) and host floats ``_q_scale_float``, ``_k_scale_float``, ``_v_scale_float``; 0.33 adds host
  tensors ``_k_scale_cpu`` / ``_v_scale_cpu`` (``set_default_quant_scales``,
  ``vllm/model_executor/layers/attention/attention.py``: 0.24.0 lines 95-119, 0.33.0 lines 133-154).
  The kernels read these, not the loadable ``k_scale`` parameters.
* Loadable ``{q,k,v}_scale`` parameters exist only when the quant config gives ``Attention`` a
  ``BaseKVCacheMethod``, and ``process_weights_after_loading`` deletes them after copying them into
  the buffers (``vllm/model_executor/layers/quantization/kv_cache.py``: 0.33.0 lines 157-163 copy,
  210-213 ``del layer.k_scale``), so a second ``load_weights`` of those names has nowhere to go.
  Without such a method (BF16 or online-quantized rollout) ``Attention.process_weights_after_loading``
  resets the buffers to 1.0 after every load (0.24.0 line 564, 0.33.0 line 594).
* Hence scales are applied *after* the weight update has finished, by writing the buffers in place
  (``copy_``/``fill_``: the storage captured by CUDA graphs stays the same). FA3 reads the device
  buffers (``q_descale``/``k_descale``/``v_descale`` from ``layer._q_scale`` …); FlashInfer passes the
  host floats to its kernels, which captured CUDA graphs freeze until they are re-captured.
* On fnuz FP8 platforms (ROCm) vLLM doubles checkpoint scales (kv_cache.py, ``is_fp8_fnuz``); done here too.
* vLLM 0.24's V1 model runner (every MoE model; dense Qwen3 runs on the V2 runner) resets ``_k_scale`` /
  ``_v_scale`` to 1.0 whenever the KV cache wakes from sleep (``vllm/v1/worker/gpu_worker.py`` 199-200 ->
  ``gpu_model_runner.py`` 935-980, ``init_fp8_kv_scales``), and verl wakes the KV cache *after* the weight
  update (``vllm_async_server.py`` 882-891). So the scales written here are also remembered on the model
  runner and written again after every KV-cache wake-up (``keep_across_kv_wake``); the V2 runner's
  ``post_kv_cache_wake_up`` resets nothing, where re-writing them is a no-op. Shown in the real engine on an
  H200 (docs/results.md#kv-scales).

Layer lookup: the pushed name minus ``.{q,k,v}_scale`` is the attention module's path in vLLM's model
(``model.layers.{i}.self_attn.attn``; ``vllm/model_executor/models/qwen3.py`` 0.24.0 line 139 /
0.33.0 line 149, ``prefix=f"{prefix}.attn"``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from fp8spec.runtime.kv_scales.kv_calibration import is_kv_scale_name, scales_per_layer

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType

logger = logging.getLogger(__name__)


def _fnuz_factor() -> float:
    try:
        from vllm.platforms import current_platform

        return 2.0 if current_platform.is_fp8_fnuz() else 1.0
    except Exception:
        return 1.0


def apply_kv_scales(
    model: torch.nn.Module,
    named_scales: Iterable[tuple[str, torch.Tensor | float]],
    fnuz_factor: float | None = None,
) -> int:
    """Write ``[(name, scale), …]`` into vLLM ``Attention`` layers of ``model``; returns layers updated.

    ``scale`` may be a float or a 1-element tensor. Unknown names raise KeyError (a silent miss would
    leave the engine on stale scales).
    """
    factor = _fnuz_factor() if fnuz_factor is None else fnuz_factor
    layers = scales_per_layer(model, named_scales, factor, "vLLM Attention", "_k_scale")
    for _prefix, layer, kinds in layers:
        for kind, v in kinds.items():
            getattr(layer, f"_{kind}_scale").fill_(v)
            setattr(layer, f"_{kind}_scale_float", v)
            cpu = getattr(layer, f"_{kind}_scale_cpu", None)  # vLLM >= 0.33 (k and v only)
            if isinstance(cpu, torch.Tensor):
                cpu.fill_(v)
    return len(layers)


def keep_across_kv_wake(model_runner: Any, named_scales: Iterable[tuple[str, torch.Tensor | float]]) -> None:
    """Remember ``named_scales`` on the model runner and write them again after every KV-cache wake-up.

    Wraps the runner's ``post_kv_cache_wake_up`` once per runner (instance attribute, so other engines in
    the process are untouched); later calls only update the remembered values.
    """
    store = model_runner.__dict__.setdefault("_fp8spec_kv_scales", {})
    store.update((name, float(v.item() if isinstance(v, torch.Tensor) else v)) for name, v in named_scales)
    if model_runner.__dict__.get("_fp8spec_kv_wake_wrapped"):
        return
    original = getattr(model_runner, "post_kv_cache_wake_up", None)
    if (
        original is None
    ):  # vLLM 0.33's runners have no KV wake-up hook and reset nothing (gpu_worker.py 341-367)
        return

    def post_kv_cache_wake_up(*args, **kwargs):
        out = original(*args, **kwargs)
        n = apply_kv_scales(model_runner.model, list(model_runner._fp8spec_kv_scales.items()))
        logger.info(
            "fp8spec kv_scales: re-applied q/k/v scales to %d attention layers after KV-cache wake-up", n
        )
        return out

    model_runner.post_kv_cache_wake_up = post_kv_cache_wake_up
    model_runner._fp8spec_kv_wake_wrapped = True


def apply_and_keep(model_runner: Any, named_scales: Iterable[tuple[str, torch.Tensor | float]]) -> int:
    """Write the scales into the runner's model now and after every later KV-cache wake-up."""
    named_scales = list(named_scales)
    n = apply_kv_scales(model_runner.model, named_scales)
    keep_across_kv_wake(model_runner, named_scales)
    return n


def scale_summary(named_scales: Iterable[tuple[str, torch.Tensor | float]]) -> str:
    """'q [min, max] k [min, max] v [min, max]' over the layers: one log line per sync shows what was pushed."""
    by_kind: dict[str, list[float]] = {}
    for name, value in named_scales:
        by_kind.setdefault(name.rsplit(".", 1)[-1][0], []).append(float(value))
    return " ".join(f"{k} [{min(v):.6g}, {max(v):.6g}]" for k, v in sorted(by_kind.items()))


def split_scales(
    weights: Iterable[tuple[str, torch.Tensor]],
) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, float]]]:
    """Split a weight list into (weights without kv scales, kv scales as floats)."""
    kept, scales = [], []
    for name, t in weights:
        if is_kv_scale_name(name):
            scales.append((name, float(t.float().item())))
        else:
            kept.append((name, t))
    return kept, scales


class Fp8specKVScaleWorkerExtension:
    """Worker extension for vLLM used without verl: ``--worker-extension-cls`` this class, then after
    each weight update (after ``finish_weight_update``)::

        llm.collective_rpc("fp8spec_set_kv_scales", args=([(name, float), ...],))
    """

    model_runner: Any  # the vLLM worker's, which this class extends

    def fp8spec_set_kv_scales(self, named_scales: Iterable[tuple[str, torch.Tensor | float]]) -> int:
        return apply_and_keep(self.model_runner, named_scales)


def patch_verl_worker_extension(module: ModuleType) -> None:
    """Patch verl 0.9.1's ``vLLMColocateWorkerExtension`` (``verl/workers/rollout/vllm_rollout/utils.py``).

    verl delivers weights in buckets to ``_update_weights(weights, peft_config, base_sync_done)``
    (line 367), called from ``update_weights_from_ipc`` (line 248), which ends with the
    post-processing step. The kv scales travel in the same buckets under the engine's names; they
    are taken out before ``load_weights`` sees them and written into the layers once
    ``update_weights_from_ipc`` has returned (after any post-processing that resets scales).
    """
    cls = module.vLLMColocateWorkerExtension
    if getattr(cls, "_fp8spec_kv_patched", False):
        return
    orig_update = cls._update_weights
    orig_ipc = cls.update_weights_from_ipc

    def _update_weights(self, weights, *args, **kwargs):
        kept, scales = split_scales(weights)
        if scales:
            self.__dict__.setdefault("_fp8spec_pending_kv_scales", []).extend(scales)
        return orig_update(self, kept, *args, **kwargs)

    def update_weights_from_ipc(self, *args, **kwargs):
        self.__dict__["_fp8spec_pending_kv_scales"] = []
        out = orig_ipc(self, *args, **kwargs)
        scales = self.__dict__.pop("_fp8spec_pending_kv_scales", [])
        if scales:
            n = apply_and_keep(self.model_runner, scales)
            for model in list(self._iter_all_models())[1:]:  # an MTP drafter: same layer names
                apply_kv_scales(model, scales)
            logger.info(
                "fp8spec kv_scales: applied %d q/k/v scales to %d attention layers (%s)",
                len(scales),
                n,
                scale_summary(scales),
            )
        return out

    _update_weights.__wrapped__ = orig_update  # type: ignore[attr-defined]
    update_weights_from_ipc.__wrapped__ = orig_ipc  # type: ignore[attr-defined]
    cls._update_weights = _update_weights
    cls.update_weights_from_ipc = update_weights_from_ipc
    cls._fp8spec_kv_patched = True
