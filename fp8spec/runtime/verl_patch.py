"""verl 0.9.1 hook points of the runtime patches (installed lazily by ``fp8spec.runtime.activate``).

How weights travel in verl 0.9.1 (read in the installed package):

* Trainer: ``ActorRolloutRefWorker.update_weights`` (``verl/workers/engine_workers.py`` line 728)
  takes ``per_tensor_param, peft_config = self.actor.engine.get_per_tensor_param(...)`` — a generator
  of ``(hf_name, bf16 tensor)`` that every trainer rank iterates — and hands it either to
  ``self.rollout.update_weights`` (colocated, "naive") or to ``self.checkpoint_engine.send_weights``.
  Extra ``(name, tensor)`` pairs appended to that generator travel with the weights.
* vLLM rollout: the tensors reach the vLLM worker's ``vLLMColocateWorkerExtension._update_weights``
  in buckets (``verl/workers/rollout/vllm_rollout/utils.py``: ``update_weights_from_ipc`` line 248, ``_update_weights`` line 367); with
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
  weight selection (``_classify_quant_weight`` / ``should_quantize_param``) and output order.
"""

from __future__ import annotations

import functools
import logging
import os

import torch

from . import blockquant
from .kv_calibration import VLLM_CALC_DIVISORS, KVScaleCalibrator, num_layers_of
from .manifest import SGLANG_KV_LOADER
from .triton_blockquant import quantize_bucket

logger = logging.getLogger(__name__)

MOD_ENGINE_WORKERS = "verl.workers.engine_workers"
MOD_VLLM_EXT = "verl.workers.rollout.vllm_rollout.utils"
MOD_VLLM_QUANT = "verl.utils.vllm.vllm_quant_utils"
MOD_FP8_UTILS = "verl.utils.fp8_utils"


# ------------------------------------------------------------------------------------------ config
def kv_divisors_from_env():
    v = os.environ.get("FP8SPEC_KV_SCALE_DIVISORS", "vllm").strip()
    if v in ("vllm", ""):
        return VLLM_CALC_DIVISORS
    if v == "fp8_max":
        return "fp8_max"
    parts = [float(p) for p in v.split(",")]
    if len(parts) != 3:
        raise ValueError(f"FP8SPEC_KV_SCALE_DIVISORS must be vllm, fp8_max or 'q,k,v', got {v!r}")
    return tuple(parts)


def kv_phases_from_env():
    v = os.environ.get("FP8SPEC_KV_CALIB_PHASES", "compute_log_prob,update_actor")
    phases = {p.strip() for p in v.split(",") if p.strip()}
    bad = phases - {"compute_log_prob", "update_actor"}
    if bad:
        raise ValueError(f"FP8SPEC_KV_CALIB_PHASES: unknown phase(s) {sorted(bad)}")
    return phases


def quant_settings(active: set) -> dict:
    """scale format and backend for the weight-sync quantizer given the active patches."""
    fmt = "fp32"
    if "ue8m0_scales" in active:
        fmt = os.environ.get("FP8SPEC_UE8M0_RULE", "ue8m0")
        if fmt not in ("ue8m0", "ue8m0_fixed"):
            raise ValueError(f"FP8SPEC_UE8M0_RULE must be ue8m0 or ue8m0_fixed, got {fmt!r}")
    backend = "auto" if "fast_block_quant" in active else "reference"
    backend = os.environ.get("FP8SPEC_BLOCK_QUANT_BACKEND", backend)
    chunk_mb = int(os.environ.get("FP8SPEC_QUANT_CHUNK_MB", "2048"))
    return {"scale_fmt": fmt, "backend": backend, "chunk_bytes": chunk_mb << 20}


# ------------------------------------------------------------------------------- kv_scales trainer
def _wrap_armed(obj, method: str, cal: KVScaleCalibrator) -> None:
    orig = getattr(obj, method)

    @functools.wraps(orig)
    def armed(*args, **kwargs):
        with cal.calibrating():
            return orig(*args, **kwargs)

    setattr(obj, method, armed)


def attach_kv_calibration(worker) -> KVScaleCalibrator | None:
    """Attach a calibrator to ``worker.actor`` (an ActorRolloutRefWorker after init_model)."""
    actor = getattr(worker, "actor", None)
    if actor is None or getattr(worker, "_fp8spec_kv_calibrator", None) is not None:
        return None
    engine = actor.engine
    module = engine.module
    n_layers = num_layers_of(module)
    if n_layers is None:
        raise RuntimeError("fp8spec kv_scales: cannot find the number of decoder layers of the actor model")
    cal = KVScaleCalibrator(n_layers, divisors=kv_divisors_from_env())
    hooked = cal.attach(module)
    if hooked == 0:
        raise RuntimeError(
            "fp8spec kv_scales: found no attention module to calibrate in the actor "
            "(expected HF *Attention modules with layer_idx, or Megatron *.self_attention.core_attention)"
        )
    phases = kv_phases_from_env()
    if "compute_log_prob" in phases:
        _wrap_armed(actor, "infer_batch", cal)
    if "update_actor" in phases:
        _wrap_armed(actor, "train_mini_batch", cal)

    rollout_name = str(worker.config.rollout.get("name", "vllm"))
    if rollout_name == "sglang":
        rollout = getattr(worker, "rollout", None)
        if rollout is not None:
            _wrap_sglang_update(rollout, cal)
    else:
        _wrap_weight_stream(engine, cal)
    worker._fp8spec_kv_calibrator = cal
    logger.info("fp8spec kv_scales: calibrating %d attention layers (%s rollout)", hooked, rollout_name)
    return cal


def _scales_for_sync(cal: KVScaleCalibrator):
    dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    cal.reduce(device=dev)
    named = cal.named_scales(device=dev)
    cal.reset()
    return named


def _wrap_weight_stream(engine, cal: KVScaleCalibrator) -> None:
    orig = engine.get_per_tensor_param

    @functools.wraps(orig)
    def get_per_tensor_param(*args, **kwargs):
        gen, peft_config = orig(*args, **kwargs)
        if peft_config is not None:  # LoRA adapter sync: no base weights, no scales
            return gen, peft_config

        def with_scales():
            yield from gen
            yield from _scales_for_sync(cal)

        return with_scales(), peft_config

    engine.get_per_tensor_param = get_per_tensor_param


def _wrap_sglang_update(rollout, cal: KVScaleCalibrator) -> None:
    orig = rollout.update_weights

    @functools.wraps(orig)
    async def update_weights(weights, **kwargs):
        out = await orig(weights, **kwargs)
        if kwargs.get("peft_config") is None:
            named = _scales_for_sync(cal)
            if named:
                await send_sglang_kv_scales(rollout, named)
        return out

    rollout.update_weights = update_weights


async def send_sglang_kv_scales(rollout, named) -> None:
    """Post the scales to every TP worker of the replica through the fp8spec custom loader.

    Same transport as verl 0.9.1's ``ServerAdapter._update_weights_delta_flush``
    (``sglang_rollout.py`` lines 413-458): every rank serializes its GPU copy, TP rank 0 gathers and
    posts one ``update_weights_from_tensor`` with ``load_format`` = the loader's import path.
    """
    import torch.distributed as dist
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    from sglang.srt.utils import MultiprocessingSerializer

    try:
        from sglang.srt.model_executor.model_runner import LocalSerializedTensor
    except ImportError:  # moved in sglang 0.5.16
        from sglang.srt.model_executor.model_runner_components.weight_updater import LocalSerializedTensor
    try:
        from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions
    except ImportError:
        from sglang.srt.patch_torch import monkey_patch_torch_reductions

    monkey_patch_torch_reductions()
    mesh = rollout.device_mesh["infer_tp"]
    tp_size = mesh.mesh.size()[0]
    serialized = [(n, MultiprocessingSerializer.serialize(t.detach().reshape(()))) for n, t in named]
    gathered = [None for _ in range(tp_size)] if mesh.get_local_rank() == 0 else None
    dist.gather_object(obj=serialized, object_gather_list=gathered, dst=mesh.mesh.tolist()[0], group=mesh.get_group())
    if mesh.get_local_rank() != 0:
        return
    named_tensors = [
        (group[0][0], LocalSerializedTensor(values=[part[1] for part in group])) for group in zip(*gathered, strict=True)
    ]
    req = UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[MultiprocessingSerializer.serialize(named_tensors) for _ in range(tp_size)],
        load_format=SGLANG_KV_LOADER,
        flush_cache=False,
    )
    await rollout._engine.update_weights_from_tensor(req)


def patch_engine_workers(module) -> None:
    """kv_scales, trainer side: wrap ``ActorRolloutRefWorker.init_model`` (keeps verl's dispatch attrs)."""
    cls = module.ActorRolloutRefWorker
    if getattr(cls, "_fp8spec_kv_patched", False):
        return
    orig = cls.init_model

    @functools.wraps(orig)  # copies verl's @register attribute (MAGIC_ATTR) along with __dict__
    def init_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        attach_kv_calibration(self)
        return out

    cls.init_model = init_model
    cls._fp8spec_kv_patched = True


# ----------------------------------------------------------------- fast_block_quant / ue8m0_scales
def _quantize_many(tensors, block, settings):
    return quantize_bucket(tensors, block=block, scale_fmt=settings["scale_fmt"], backend=settings["backend"])


def make_vllm_quant_weights(module, settings: dict):
    """Replacement for ``vllm_quant_utils.quant_weights`` (same signature, same yield order)."""
    orig = module.quant_weights

    @functools.wraps(orig)
    def quant_weights(weights, model, quant_config, dtype=torch.bfloat16):
        if module.is_deepseek_v4_model(model) or module.is_vllm_ascend_mx_quant(quant_config):
            yield from orig(weights, model, quant_config, dtype=dtype)
            return
        module.fp8_state.seen_params.clear()
        module.fp8_state.fp8_param_names.clear()
        block = tuple(quant_config.weight_block_size)
        items = list(weights)
        fp8_idx = [i for i, (k, _) in enumerate(items) if module._classify_quant_weight(k, model, False) == "fp8"]
        results = {}
        chunk, chunk_bytes = [], 0
        for i in fp8_idx + [None]:
            if i is not None:
                chunk.append(i)
                chunk_bytes += items[i][1].numel() * items[i][1].element_size()
            if chunk and (i is None or chunk_bytes >= settings["chunk_bytes"]):
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

    quant_weights._fp8spec = settings
    return quant_weights


def patch_vllm_quant(module, settings: dict) -> None:
    if getattr(module.quant_weights, "_fp8spec", None) is not None:
        return
    module.quant_weights = make_vllm_quant_weights(module, settings)


def patch_fp8_utils(module, settings: dict) -> None:
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
        buf, nbytes = [], 0

        def flush():
            idx = [j for j, (k, _) in enumerate(buf) if self.should_quantize_param(k)]
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
            if nbytes >= settings["chunk_bytes"]:
                for item in flush():
                    yield item
                buf, nbytes = [], 0
        if buf:
            for item in flush():
                yield item

    quant_weights_by_name._fp8spec = settings
    cls.quant_weights_by_name = quant_weights_by_name
