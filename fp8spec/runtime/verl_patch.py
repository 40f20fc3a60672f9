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
  (BENCHMARKS.md section 3).

This module holds the installers (called by ``fp8spec.runtime.activate`` when their target module is imported);
the trainer-side calibration is ``kv_hooks``, the flat-bucket engine ``flat_bucket``, the settings ``settings``.
"""

from __future__ import annotations

import functools
import logging
import operator
import pickle
import time
from collections.abc import Iterable, Iterator
from itertools import compress, repeat
from types import ModuleType
from typing import Any, Callable

import torch

from fp8spec.runtime.kv_scales.kv_hooks import attach_kv_calibration
from fp8spec.runtime.quantization import blockquant
from fp8spec.runtime.quantization.flat_bucket import ENGINE, FlatBucketEngine, emit_flat
from fp8spec.runtime.quantization.triton_blockquant import quantize_bucket
from fp8spec.runtime.settings import QuantSettings
from fp8spec.runtime.trainer.te_report import attach_te_report

logger = logging.getLogger(__name__)

MOD_ENGINE_WORKERS = "verl.workers.engine_workers"
MOD_VLLM_EXT = "verl.workers.rollout.vllm_rollout.utils"
MOD_VLLM_QUANT = "verl.utils.vllm.vllm_quant_utils"
MOD_FP8_UTILS = "verl.utils.fp8_utils"
MOD_BUCKET_TRANSFER = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
Named = tuple[str, torch.Tensor]


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


# ----------------------------------------------------------------- fast_block_quant / ue8m0_scales
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

        _importhook.when_imported(
            MOD_BUCKET_TRANSFER, functools.partial(patch_bucket_receiver, engine=engine)
        )


class _RecordingSocket:
    """Wraps the receiver's zmq socket; keeps the last bucket-metadata message (raw bytes + object).

    ``recv_pyobj`` is pyzmq's own definition (``recv`` then ``pickle.loads``)."""

    def __init__(self, sock):
        self._sock = sock
        self.last_raw = None
        self.last_meta = None

    def recv_pyobj(self, flags=0):
        raw = self._sock.recv(flags)
        obj = pickle.loads(raw)
        if isinstance(obj, dict) and "bucket_meta" in obj:
            self.last_raw = raw if isinstance(raw, bytes) else None
            self.last_meta = obj["bucket_meta"]
        return obj

    def __getattr__(self, name):
        return getattr(self._sock, name)


def patch_bucket_receiver(module: ModuleType, engine: FlatBucketEngine = ENGINE, report: bool = True) -> None:
    """fast_block_quant, vLLM worker: let quant_weights see each received bucket's flat buffer and
    metadata (``BucketedWeightReceiver``, bucketed_weight_transfer.py 240-355), and give the reused
    output memory back when the receiver cleans up after a round (its ``_cleanup``, 332-355, runs in a
    ``finally`` after the last bucket, line 309, and ends with ``empty_cache``, 345)."""
    cls = module.BucketedWeightReceiver
    if getattr(cls, "_fp8spec_flat_patched", False):
        return
    orig_init_socket, orig_receive, orig_cleanup = cls._init_socket, cls.receive_weights, cls._cleanup

    @functools.wraps(orig_init_socket)
    def _init_socket(self):
        orig_init_socket(self)
        if not isinstance(self.socket, _RecordingSocket):
            self.socket = _RecordingSocket(self.socket)

    @functools.wraps(orig_receive)
    def receive_weights(self, on_bucket_received):
        def on_bucket(weights, is_last):
            sock = self.socket
            meta = getattr(sock, "last_meta", None) if isinstance(sock, _RecordingSocket) else None
            if meta is None or self.use_shm or not isinstance(self.buffer, torch.Tensor):
                return on_bucket_received(weights, is_last)  # shm: views were copied one by one (296-297)
            with engine.received_bucket(self.buffer, meta, weights, raw=sock.last_raw):
                return on_bucket_received(weights, is_last)

        start, launches = time.perf_counter(), engine.stats["flat_launches"]
        out = orig_receive(self, on_bucket)
        # one line per weight sync: which quantizer ran and how long the whole receive took
        if not report:  # direct_sync: its own line per sync (direct_sync_hook) says what ran
            return out
        logger.info(
            "fp8spec fast_block_quant: weight sync received in %.3f s, %d flat-bucket launches, stats %s",
            time.perf_counter() - start,
            engine.stats["flat_launches"] - launches,
            dict(engine.stats),
        )
        return out

    @functools.wraps(orig_cleanup)
    def _cleanup(self):
        try:
            engine.release_outputs()
        finally:
            orig_cleanup(self)

    cls._init_socket = _init_socket
    cls.receive_weights = receive_weights
    cls._cleanup = _cleanup
    cls._fp8spec_flat_patched = True


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
