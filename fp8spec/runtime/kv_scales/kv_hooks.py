"""kv_scales, trainer side: calibrate q/k/v scales in the actor's forwards and deliver them with each weight sync.

Installed by ``verl_patch.patch_engine_workers`` (verl 0.9.1, ``verl/workers/engine_workers.py``): after
``ActorRolloutRefWorker.init_model`` a ``KVScaleCalibrator`` is attached to the actor module, ``infer_batch`` /
``train_mini_batch`` of that actor instance arm it (``compute_log_prob`` calls ``self.actor.infer_batch``, lines
703-706; ``update_actor`` calls ``self.actor.train_mini_batch``, lines 713-716), and the scales reach the engine:

* vLLM: the engine's ``get_per_tensor_param`` (instance attribute) appends the all-reduced scales to the weight
  stream (``update_weights``, line 728, iterates it), and ``engines.vllm_kv`` takes them out in the vLLM worker;
* SGLang: posted after verl's weight update through the fp8spec custom loader (``engines.sglang_kv``).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import torch

from fp8spec.runtime.kv_scales import kv_scale_route
from fp8spec.runtime.kv_scales.kv_calibration import KVScaleCalibrator, num_layers_of
from fp8spec.runtime.manifest import SGLANG_KV_LOADER
from fp8spec.runtime.settings import KVSettings

if TYPE_CHECKING:
    from collections.abc import Iterable

logger = logging.getLogger(__name__)


def _wrap_armed(obj, method: str, cal: KVScaleCalibrator) -> None:
    orig = getattr(obj, method)

    @functools.wraps(orig)
    def armed(*args, **kwargs):
        with cal.calibrating():
            return orig(*args, **kwargs)

    setattr(obj, method, armed)


def attach_kv_calibration(worker: Any) -> KVScaleCalibrator | None:
    """Attach a calibrator to ``worker.actor`` (an ActorRolloutRefWorker after init_model)."""
    actor = getattr(worker, "actor", None)
    if actor is None or getattr(worker, "_fp8spec_kv_calibrator", None) is not None:
        return None
    # verl's rollout name defaults to vLLM; the route is looked up before any hook is attached, so an engine with
    # no route fails the worker's start untouched
    rollout_name = str(worker.config.rollout.get("name", "vllm"))
    route = kv_scale_route(rollout_name)
    engine = actor.engine
    module = engine.module
    n_layers = num_layers_of(module)
    if n_layers is None:
        raise RuntimeError("fp8spec kv_scales: cannot find the number of decoder layers of the actor model")
    settings = KVSettings.from_env()
    cal = KVScaleCalibrator(n_layers, divisors=settings.divisors)
    hooked = cal.attach(module)
    if hooked == 0:
        raise RuntimeError(
            "fp8spec kv_scales: found no attention module to calibrate in the actor "
            "(expected HF *Attention modules with layer_idx, or Megatron *.self_attention.core_attention)"
        )
    if "compute_log_prob" in settings.phases:
        _wrap_armed(actor, "infer_batch", cal)
    if "update_actor" in settings.phases:
        _wrap_armed(actor, "train_mini_batch", cal)

    if route == "rollout_update":
        rollout = getattr(worker, "rollout", None)
        if rollout is not None:
            _wrap_sglang_update(rollout, cal)
    else:
        _wrap_weight_stream(engine, cal)
    worker._fp8spec_kv_calibrator = cal
    logger.info("fp8spec kv_scales: calibrating %d attention layers (%s rollout)", hooked, rollout_name)
    return cal


def scales_for_sync(cal: KVScaleCalibrator) -> list[tuple[str, torch.Tensor]]:
    """The scales to push with this weight sync.

    ``once`` (FP8SPEC_KV_RECALIBRATE): the first scales computed from real rollout data are kept and pushed
    again at every later sync (vLLM's own calculate_kv_scales calibrates on the profiling dummy run instead,
    and its V1 runner resets the scales at every KV-cache wake-up; docs/results.md#kv-scales). Every rank
    freezes at the same sync: the decision follows the all-reduced amax, which all ranks share.
    """
    frozen = getattr(cal, "_fp8spec_frozen", None)
    if frozen is not None:
        return [(n, t.clone()) for n, t in frozen]
    dev = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    cal.reduce(device=dev)
    named = cal.named_scales(device=dev)
    cal.reset()
    if named and KVSettings.from_env().recalibrate == "once":
        cal._fp8spec_frozen = [(n, t.clone()) for n, t in named]  # type: ignore[attr-defined]
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
            yield from scales_for_sync(cal)

        return with_scales(), peft_config

    engine.get_per_tensor_param = get_per_tensor_param


def _wrap_sglang_update(rollout, cal: KVScaleCalibrator) -> None:
    orig = rollout.update_weights

    @functools.wraps(orig)
    async def update_weights(weights, **kwargs):
        out = await orig(weights, **kwargs)
        if kwargs.get("peft_config") is None:
            named = scales_for_sync(cal)
            if named:
                await send_sglang_kv_scales(rollout, named)
        return out

    rollout.update_weights = update_weights


async def send_sglang_kv_scales(rollout: Any, named: Iterable[tuple[str, torch.Tensor]]) -> None:
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
    dist.gather_object(
        obj=serialized, object_gather_list=gathered, dst=mesh.mesh.tolist()[0], group=mesh.get_group()
    )
    if mesh.get_local_rank() != 0:
        return
    assert gathered is not None  # filled on the rank that gathers
    named_tensors = [
        (group[0][0], LocalSerializedTensor(values=[part[1] for part in group]))
        for group in zip(*gathered, strict=True)
    ]
    req = UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[MultiprocessingSerializer.serialize(named_tensors) for _ in range(tp_size)],
        load_format=SGLANG_KV_LOADER,
        flush_cache=False,
    )
    await rollout._engine.update_weights_from_tensor(req)
