"""SGLang side of ``kv_scales``: a custom weight loader that writes pushed k/v scales.

SGLang facts relied on (wheel sources, paths relative to the package root):

* ``update_weights_from_tensor`` accepts ``load_format=<import path>`` when that path is listed in
  ``--custom-weight-loader``; SGLang then imports it inside every TP worker and calls
  ``loader(model, named_tensors)`` (0.5.12 ``srt/model_executor/model_runner.py`` lines 2092-2094;
  0.5.23 ``srt/model_executor/model_runner_components/weight_updater.py`` lines 374-376). verl 0.9.1
  uses the same hook for its delta loader (``verl/workers/rollout/sglang_rollout/delta_loader.py``).
* ``RadixAttention`` keeps ``k_scale``/``v_scale`` (device tensors, or None without a KV quant
  method) and host floats ``k_scale_float``/``v_scale_float`` (``srt/layers/radix_attention.py``
  0.5.12 lines 89-92, 0.5.23 lines 94-98); the FA3 backend passes ``layer.k_scale`` as ``k_descale``
  (0.5.12 ``srt/layers/attention/flashattention_backend.py`` lines 679-681), others read the floats.
  ``BaseKVCacheMethod.process_weights_after_loading`` fills both
  (``srt/layers/quantization/kv_cache.py``: 0.5.12 lines 82-85, 0.5.23 lines 80-83), doubling on fnuz platforms.
* SGLang MHA backends do not use a q scale; pushed ``q_scale`` values are accepted and ignored.
* Attention path: ``model.layers.{i}.self_attn.attn`` (``srt/models/qwen3.py`` line 150,
  ``prefix=add_prefix("attn", prefix)``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from fp8spec.runtime.kv_scales.kv_calibration import scales_per_layer

if TYPE_CHECKING:
    from collections.abc import Iterable

logger = logging.getLogger(__name__)
_checked = False


def _fnuz_factor() -> float:
    try:
        from sglang.srt.utils import is_fp8_fnuz

        return 2.0 if is_fp8_fnuz() else 1.0
    except Exception:
        return 1.0


def apply_kv_scales(
    model: torch.nn.Module,
    named_scales: Iterable[tuple[str, torch.Tensor | float]],
    fnuz_factor: float | None = None,
) -> int:
    """Write k/v scales into SGLang ``RadixAttention`` layers; returns the number of layers updated."""
    factor = _fnuz_factor() if fnuz_factor is None else fnuz_factor
    # MHA backends take no q scale
    layers = scales_per_layer(
        model, named_scales, factor, "SGLang RadixAttention", "k_scale_float", skip=("q",)
    )
    for prefix, layer, kinds in layers:
        for kind, v in kinds.items():
            t = getattr(layer, f"{kind}_scale")
            if isinstance(t, torch.Tensor):
                t.data.fill_(v)
            else:
                logger.warning(
                    "fp8spec kv_scales: %s has no %s_scale tensor (no FP8 KV quant method); setting the host "
                    "float only",
                    prefix,
                    kind,
                )
            setattr(layer, f"{kind}_scale_float", v)
    return len(layers)


def load_kv_scales(model: torch.nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """SGLang custom weight loader (``--custom-weight-loader fp8spec.runtime.kv_scales.sglang_kv.load_kv_scales``)."""
    global _checked
    if not _checked:
        from fp8spec.runtime.version_guard import require

        require("sglang", "kv_scales")
        _checked = True
    n = apply_kv_scales(model, list(named_tensors))
    logger.info("fp8spec kv_scales: applied k/v scales to %d attention layers", n)
