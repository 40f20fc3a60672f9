"""verl's weight-sync quantizers replaced by bucketed ones (patches ``fast_block_quant`` and ``ue8m0_scales``).

vLLM path: ``vllm_quant_utils.quant_weights`` (in the vLLM worker) quantizes each received bucket with one launch on
its flat buffer (``flat_bucket``, the buffer shown by ``weight_sync.receiver.flat_receive``), or per chunk of a
tensor list; SGLang path: ``FP8QuantizerHelper.quant_weights_by_name`` (in the trainer). Both keep verl's own
weight selection and output order (``verl_patch``'s docstring has verl's lines).
"""

from __future__ import annotations

import functools
import logging
import operator
import time
from collections.abc import Iterable, Iterator
from itertools import compress, repeat
from types import ModuleType
from typing import Any, Callable

import torch

from fp8spec.runtime.quantization import blockquant
from fp8spec.runtime.quantization.flat_bucket import ENGINE, FlatBucketEngine, emit_flat
from fp8spec.runtime.quantization.triton_blockquant import quantize_bucket
from fp8spec.runtime.settings import QuantSettings
from fp8spec.runtime.targets import MOD_BUCKET_TRANSFER

logger = logging.getLogger(__name__)
Named = tuple[str, torch.Tensor]


def _quantize_many(
    tensors: list[torch.Tensor], block: tuple[int, int], settings: QuantSettings
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return quantize_bucket(tensors, block=block, scale_fmt=settings.scale_fmt, backend=settings.backend)


def make_vllm_quant_weights(
    module: ModuleType, settings: QuantSettings, engine: FlatBucketEngine = ENGINE
) -> Callable[..., Iterator[Named]]:
    """Replacement for ``vllm_quant_utils.quant_weights`` (same signature, same yield order)."""
    orig = module.quant_weights

    @functools.wraps(orig)
    def quant_weights(
        weights: Iterable[Named], model: Any, quant_config: Any, dtype: torch.dtype = torch.bfloat16
    ) -> Iterator[Named]:
        if module.is_deepseek_v4_model(model) or module.is_vllm_ascend_mx_quant(quant_config):
            yield from orig(weights, model, quant_config, dtype=dtype)
            return
        module.fp8_state.seen_params.clear()
        module.fp8_state.fp8_param_names.clear()
        block = tuple(quant_config.weight_block_size)
        items = list(weights)
        flat_on = settings.flat_buckets
        spec = engine.speculate(items, dtype, block, settings) if flat_on else None
        classify = module._classify_quant_weight  # verl's own selection, as quant_weights line 370
        kinds = [classify(k, model, False) for k, _ in items]
        sel = tuple(compress(range(len(kinds)), map(operator.eq, kinds, repeat("fp8"))))
        if flat_on:
            flat = engine.quantize(items, sel, dtype, block, settings, spec)
            if flat is not None:
                yield from emit_flat(items, *flat)
                return
        engine.stats["list_path"] += 1
        results: dict[int, Any] = {}
        chunk: list[int] = []
        chunk_bytes = 0
        for i in [*sel, None]:
            if i is not None:
                chunk.append(i)
                chunk_bytes += items[i][1].numel() * items[i][1].element_size()
            if chunk and (i is None or chunk_bytes >= settings.chunk_bytes):
                outs = _quantize_many([items[j][1].to(dtype) for j in chunk], block, settings)
                results.update(zip(chunk, outs))
                chunk, chunk_bytes = [], 0
        for i, (k, v) in enumerate(items):
            if i in results:
                q, s = results.pop(i)
                yield (k, q)
                yield (blockquant.scale_name(k), s)
            else:
                yield (k, v)

    quant_weights._fp8spec = settings  # type: ignore[attr-defined]
    return quant_weights


def patch_vllm_quant(module: ModuleType, settings: QuantSettings, engine: FlatBucketEngine = ENGINE) -> None:
    if getattr(module.quant_weights, "_fp8spec", None) is not None:
        return
    module.quant_weights = make_vllm_quant_weights(module, settings, engine)  # type: ignore[attr-defined]
    if settings.flat_buckets and settings.backend != "reference":
        from fp8spec.runtime import _importhook
        from fp8spec.runtime.weight_sync.receiver.flat_receive import patch_bucket_receiver

        _importhook.when_imported(
            MOD_BUCKET_TRANSFER, functools.partial(patch_bucket_receiver, engine=engine)
        )


def patch_fp8_utils(module: ModuleType, settings: QuantSettings) -> None:
    """Replace ``FP8QuantizerHelper.quant_weights_by_name`` (SGLang/TRT-LLM paths, trainer process)."""
    cls = module.FP8QuantizerHelper
    if getattr(cls.quant_weights_by_name, "_fp8spec", None) is not None:
        return
    orig = cls.quant_weights_by_name

    @functools.wraps(orig)
    async def quant_weights_by_name(self, weights, dtype=torch.bfloat16):
        if isinstance(self.quant_config, dict):
            block = self.quant_config.get("weight_block_size")
        else:
            block = getattr(self.quant_config, "weight_block_size", None)
        if block is None:
            raise ValueError("weight_block_size not found in quant_config")
        block = tuple(block)
        buf: list[Any] = []
        nbytes = 0
        counts = {"quantized": 0, "passed": 0, "launches": 0}
        t0 = time.perf_counter()

        def flush():
            idx = [j for j, (k, _) in enumerate(buf) if self.should_quantize_param(k)]
            counts["quantized"] += len(idx)
            counts["passed"] += len(buf) - len(idx)
            counts["launches"] += bool(idx)
            outs = _quantize_many([buf[j][1].to(dtype) for j in idx], block, settings) if idx else []
            res = dict(zip(idx, outs))
            out = []
            for j, (k, v) in enumerate(buf):
                if j in res:
                    out.append((k, res[j][0]))
                    out.append((blockquant.scale_name(k), res[j][1]))
                else:
                    out.append((k, v))
            return out

        async for k, v in module.ensure_async_iterator(weights):
            buf.append((k, v))
            nbytes += v.numel() * v.element_size()
            if nbytes >= settings.chunk_bytes:
                for item in flush():
                    yield item
                buf, nbytes = [], 0
        if buf:
            for item in flush():
                yield item
        # one line per sync in the trainer's log: the evidence that the patch ran where SGLang's quantizer runs
        logger.info(
            "fp8spec fast_block_quant (trainer): %d tensors quantized in %d chunks, %d passed through, "
            "%.3f s from first to last tensor of the sync (sends included)",
            counts["quantized"],
            counts["launches"],
            counts["passed"],
            time.perf_counter() - t0,
        )

    quant_weights_by_name._fp8spec = settings  # type: ignore[attr-defined]
    cls.quant_weights_by_name = quant_weights_by_name


def _settings() -> QuantSettings:
    from fp8spec.runtime import active_patches

    return QuantSettings.from_env(active_patches())


def install_vllm_quant(module: ModuleType) -> None:
    """The hook table's installer: ``patch_vllm_quant`` with the settings of the active patches."""
    patch_vllm_quant(module, _settings())


def install_fp8_utils(module: ModuleType) -> None:
    """The hook table's installer: ``patch_fp8_utils`` with the settings of the active patches."""
    patch_fp8_utils(module, _settings())
