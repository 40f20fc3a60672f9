"""The ``direct_sync`` runtime patch: verl 0.9.1's vLLM worker extension routes each received bucket through
``DirectSync`` first; verl's own receiver loads what the plan does not cover.

Hook points (verl 0.9.1 ``verl/workers/rollout/vllm_rollout/utils.py``):

* ``vLLMColocateWorkerExtension.update_weights_from_ipc`` (248-353): stages the FP8 parameters for loading
  (``prepare_quanted_weights_for_loading``, 286-291), receives the buckets (``receive_weights``, 325) and runs
  ``process_quanted_weights_after_loading`` once after the last bucket (336-340). The wrapper marks the start of a
  sync (the destinations are bound at its first bucket, after the staging swapped them) and logs one line of
  counts at its end: never silent.
* ``vLLMColocateWorkerExtension._update_weights`` (367-414), called once per bucket: the wrapper hands the bucket
  to ``DirectSync.apply`` and passes only the rest to verl's ``_update_weights`` (``split_buffer_updates`` +
  ``load_quanted_weights`` + vLLM's ``load_weights``). LoRA syncs and MTP drafter syncs (the drafter would miss
  the direct writes) go to verl whole.

The plan is built once per engine, at the first sync, from the live model: its named parameters (after verl's
staging), ``type(model).packed_modules_mapping`` (the fused parts in shard order: vLLM 0.24.0 ``models/qwen3.py``
``Qwen3ForCausalLM.packed_modules_mapping``, ``qwen3_moe.py`` the same), ``model.model.get_expert_mapping()``
(``qwen3_moe.py`` 519-529), each fused layer's ``output_sizes`` (``layers/linear.py`` 617, 980-984) and the TP
rank and size (``vllm.distributed.parallel_state`` 2012-2020).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import torch

from fp8spec.runtime.weight_sync.receiver.direct_sync import DirectSync
from fp8spec.runtime.weight_sync.receiver.direct_sync_plan import Planner

log = logging.getLogger("fp8spec.runtime.weight_sync.receiver.direct_sync")

MOD_VLLM_EXT = "verl.workers.rollout.vllm_rollout.utils"
FLAG = "_fp8spec_direct_patched"
MOD_QUANT_UTILS = (
    "verl.utils.vllm.vllm_quant_utils"  # process_quanted_weights_after_loading, imported per sync
)
DEFER_TENSOR_BYTES = (
    256 << 20
)  # larger uncovered tensors (embeddings, lm_head) are loaded at once, not copied
DEFER_TOTAL_BYTES = 1 << 30
# one sync's counts (the sync's log line and the extension's _fp8spec_direct_stats)
COUNTS = ("buckets", "direct", "copied", "verl", "verl_calls", "views", "lazy_tensors")


def stacked_from_packed(packed: Mapping[str, Sequence[str]]) -> list[tuple[str, str, int]]:
    """``stacked_params_mapping``-shaped tuples from a model class's ``packed_modules_mapping``; the shard ids are
    the parts' positions (the plan only uses their order, which both tables share)."""
    return [(fused, part, i) for fused, parts in packed.items() for i, part in enumerate(parts)]


def loader_name(param: Any) -> str | None:
    """The qualified name of a parameter's ``weight_loader`` (None: it has none, vLLM uses
    ``default_weight_loader``); a bound method by its function, so subclasses report where it is defined."""
    loader = getattr(param, "weight_loader", None)
    if loader is None:
        return None
    fn = getattr(loader, "__func__", loader)
    return getattr(fn, "__qualname__", None) or repr(fn)


def engine_model(runner: Any) -> Any:
    """The runner's model without vLLM's CUDA-graph wrappers: with full CUDA graphs the V1 runner holds a
    ``CUDAGraphWrapper`` (gpu_model_runner.py 5304-5320), which forwards instance attributes but not the model
    class's ``packed_modules_mapping``; ``get_model()`` unwraps it (gpu_model_runner.py 3211-3219). Seen in
    ``main_ppo`` on the tiny Qwen3-MoE: without this, q/k/v went to verl's receiver at every sync."""
    get_model = getattr(runner, "get_model", None)
    return get_model() if callable(get_model) else runner.model


def engine_tables(model: Any) -> dict[str, Any]:
    """What the Planner needs, read from a live vLLM model object (pure attribute reads)."""
    named = list(model.named_parameters())
    params = {n: (tuple(p.shape), str(p.dtype).replace("torch.", "")) for n, p in named}
    loaders = {n: loader_name(p) for n, p in named if params[n][1] != "float8_e4m3fn"}
    owners = {n.rsplit(".", 1)[0] for n in params}  # modules that hold parameters directly
    part_rows = {
        n: [int(s) for s in m.output_sizes]
        for n, m in model.named_modules()
        if n in owners and isinstance(getattr(m, "output_sizes", None), (list, tuple))
    }
    packed = getattr(type(model), "packed_modules_mapping", None) or {}
    inner = getattr(model, "model", None)
    get_experts = getattr(inner, "get_expert_mapping", None)
    experts = list(get_experts()) if callable(get_experts) else []
    return {
        "params": params,
        "part_rows": part_rows,
        "stacked": stacked_from_packed(packed),
        "experts": experts,
        "loaders": loaders,
    }


def tp_rank_size() -> tuple[int, int]:
    from vllm.distributed import parallel_state as ps

    return ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()


class DirectState:
    """One engine's direct path: the DirectSync built at the first sync, and this sync's counts."""

    def __init__(self, tp: Callable[[], tuple[int, int]] = tp_rank_size):
        self.tp = tp
        self.ds: DirectSync | None = None
        self.broken: str | None = None  # why the direct path is off for this engine (logged once)
        self.syncs = 0
        self.new_sync = False
        self.counts = dict.fromkeys(COUNTS, 0)
        self.early_acks_at = 0  # lazy_receive.STATS at the start of this sync
        self.into_at = 0  # the DirectSync's into_params count at the start of this sync
        self.left_out: list[str] = []
        # Uncovered tensors of earlier buckets, cloned out of the reused IPC buffer, loaded by verl in one call
        # before the post-load processing: vLLM's load_weights and verl's load_quanted_weights cost ~14 ms per
        # call on Qwen3-30B-A3B whatever they load (docs/results.md#weight-sync: 29 calls for 243 small tensors).
        self.pending: list[tuple[str, torch.Tensor]] = []
        self.pending_bytes = 0

    def defer(self, weights: list) -> list:
        """Keep the small uncovered tensors of a bucket for one load per sync; returns what verl must load now:
        nothing, or (when a tensor is large, or the kept ones grow past ``DEFER_TOTAL_BYTES``) everything
        kept so far plus this bucket's, in order."""
        size = sum(t.numel() * t.element_size() for _, t in weights)
        if any(t.numel() * t.element_size() > DEFER_TENSOR_BYTES for _, t in weights) or (
            self.pending_bytes + size > DEFER_TOTAL_BYTES
        ):
            return self.take() + list(weights)
        self.pending += [(n, t.clone()) for n, t in weights]
        self.pending_bytes += size
        return []

    def take(self) -> list:
        out, self.pending, self.pending_bytes = self.pending, [], 0
        return out

    def _build(self, model: Any, dtype: torch.dtype) -> DirectSync:
        t = engine_tables(model)
        rank, size = self.tp()
        planner = Planner(
            t["params"], t["part_rows"], t["stacked"], t["experts"], rank, size, loaders=t["loaders"]
        )
        log.info(
            "fp8spec direct_sync: plan built from the engine (%d parameters, %d fused layers, %d expert "
            "mappings, tp %d/%d)",
            len(t["params"]),
            len(t["part_rows"]),
            len(t["experts"]),
            rank,
            size,
        )
        return DirectSync(planner, dtype, on_left_out=self._left_out, round_in_kernel=True, into_params=True)

    def _left_out(self, name: str, why: str) -> None:
        self.left_out.append(name)
        log.info("fp8spec direct_sync: %s -> verl's receiver (%s)", name, why)

    def route(self, model: Any, dtype: torch.dtype, weights: list, bucket: Any = None) -> list:
        """Quantize the covered tensors of one bucket into the engine; the rest, in order, for verl.
        ``bucket``: verl's flat receive buffer holding ``weights`` (``FlatBucketEngine.bucket``), if known."""
        self.counts["buckets"] += 1
        if self.broken is None and self.ds is None:
            try:
                self.ds = self._build(model, dtype)
            except Exception as exc:  # an engine the plan cannot read: verl keeps every tensor, said once
                self.broken = f"plan not built: {exc!r}"
                log.warning("fp8spec direct_sync: %s; verl's receiver loads every tensor", self.broken)
        if self.ds is None:
            self.counts["verl"] += len(weights)
            return weights
        if self.new_sync:  # after verl's staging swapped the parameters (prepare_quanted_weights_for_loading)
            self.ds.bind(dict(model.named_parameters()))
            self.new_sync = False
        copied = self.ds.stats["copied_tensors"]
        rest = self.ds.apply(weights, bucket)
        self.counts["copied"] += self.ds.stats["copied_tensors"] - copied
        self.counts["direct"] += len(weights) - len(rest)
        self.counts["verl"] += len(rest)
        return rest

    def begin(self) -> None:
        from fp8spec.runtime.weight_sync.receiver.lazy_receive import STATS

        self.syncs += 1
        self.new_sync = True
        self.counts = dict.fromkeys(COUNTS, 0)
        self.pending, self.pending_bytes = [], 0
        self.early_acks_at = STATS["early_acks"]
        self.into_at = self.ds.stats["into_params"] if self.ds is not None else 0

    def end(self, seconds: float | None = None) -> dict:
        from fp8spec.runtime.weight_sync.receiver.lazy_receive import STATS

        self.counts["early_acks"] = STATS["early_acks"] - self.early_acks_at
        into = (self.ds.stats["into_params"] - self.into_at) if self.ds is not None else 0
        # buckets quantized into the parameters: no staging outputs, no copy runs for them
        kept = f", {into} buckets quantized straight into the parameters" if into else ""
        log.info(
            "fp8spec direct_sync: sync %d: %d tensors written into the engine's parameters (%d quantized, %d "
            "copied), %d through verl's receiver in %d calls, %d buckets (%d acked on receipt: the trainer filled "
            "the next meanwhile)%s%s%s%s",
            self.syncs,
            self.counts["direct"],
            self.counts["direct"] - self.counts["copied"],
            self.counts["copied"],
            self.counts["verl"],
            self.counts["verl_calls"],
            self.counts["buckets"],
            self.counts["early_acks"],
            # lazy_receive: how many of the received tensors needed a view (the rest were read in place)
            f", views built for {self.counts['views']} of {self.counts['lazy_tensors']} tensors"
            if self.counts["lazy_tensors"]
            else "",
            kept,
            f" ({self.broken})" if self.broken else "",
            "" if seconds is None else f", {seconds:.3f} s",
        )
        return dict(self.counts, syncs=self.syncs, broken=self.broken)


def _state(ext: Any, factory: Callable[[], DirectState]) -> DirectState:
    st = getattr(ext, "_fp8spec_direct", None)
    if st is None:
        st = factory()
        ext._fp8spec_direct = st
    return st


def check_cast(weights: Any, engine_dtype: torch.dtype) -> None:
    """Refuse a bucket whose float32 weights the trainer cast to another dtype than the engine's
    (``FP8SPEC_SEND_CAST_BF16`` with a float16 or float32 engine): loading it would round them twice, silently."""
    cast = getattr(weights, "cast", None)  # lazy_receive.BucketViews, from the message
    if cast is not None and str(engine_dtype).removeprefix("torch.") != cast:
        raise RuntimeError(
            f"fp8spec direct_sync: the trainer sent float32 weights cast to {cast} (FP8SPEC_SEND_CAST_BF16=1) "
            f"but this engine's dtype is {engine_dtype}; set FP8SPEC_SEND_CAST_BF16=0 for this run"
        )


def patch_worker_extension(
    module: ModuleType, factory: Callable[[], DirectState] = DirectState, engine: Any = None
) -> None:
    """Wrap ``vLLMColocateWorkerExtension`` in ``module`` (verl's vllm_rollout/utils.py); idempotent.

    ``engine``: the ``FlatBucketEngine`` whose receiver patch (``flat_receive.patch_bucket_receiver``) exposes the
    bucket being received, so covered tensors are quantized where they lie in verl's buffer."""
    import time

    if engine is None:
        from fp8spec.runtime.quantization.flat_bucket import ENGINE as engine

    cls = module.vLLMColocateWorkerExtension
    if getattr(cls, FLAG, False):
        return
    orig_update, orig_ipc = cls._update_weights, cls.update_weights_from_ipc

    def flush(self, st: DirectState, peft_config, base_sync_done) -> None:
        kept = st.take()
        if kept:
            st.counts["verl_calls"] += 1
            orig_update(self, kept, peft_config, base_sync_done)

    @functools.wraps(orig_ipc)
    def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
        st = _state(self, factory)
        st.begin()
        t0 = time.perf_counter()
        # verl imports process_quanted_weights_after_loading inside this method (utils.py 343-345) and calls it
        # after the last bucket: for this sync it first loads the uncovered tensors kept back (DirectState.defer)
        quant_utils: Any = sys.modules.get(MOD_QUANT_UTILS)
        post = getattr(quant_utils, "process_quanted_weights_after_loading", None)
        if quant_utils is not None and post is not None:

            @functools.wraps(post)
            def post_after_kept(*args, **kwargs):
                flush(self, st, peft_config, base_sync_done)
                return post(*args, **kwargs)

            quant_utils.process_quanted_weights_after_loading = post_after_kept
        try:
            out = orig_ipc(self, peft_config=peft_config, base_sync_done=base_sync_done, use_shm=use_shm)
        finally:
            if quant_utils is not None and post is not None:
                quant_utils.process_quanted_weights_after_loading = post
        if st.pending:  # a sync that ran no post-load processing: load what was kept now, and say so
            log.warning("fp8spec direct_sync: %d kept tensors loaded after the sync", len(st.pending))
            flush(self, st, peft_config, base_sync_done)
        self._fp8spec_direct_stats = st.end(time.perf_counter() - t0)
        return out

    @functools.wraps(orig_update)
    def _update_weights(self, weights, peft_config, base_sync_done):
        st = _state(self, factory)
        check_cast(weights, self.model_runner.vllm_config.model_config.dtype)
        drafter = getattr(self, "_use_mtp_drafter_weight_sync", None)
        if (peft_config and base_sync_done) or (callable(drafter) and drafter()):
            st.counts["verl"] += len(
                weights
            )  # LoRA / MTP drafter: verl loads all (counted in the sync's line)
            return orig_update(self, weights, peft_config, base_sync_done)
        runner = self.model_runner
        bucket = engine.bucket  # set by the receiver patch around this callback (same list object)
        rest = st.route(engine_model(runner), runner.vllm_config.model_config.dtype, weights, bucket)
        if rest and st.ds is not None and sys.modules.get(MOD_QUANT_UTILS) is not None:
            rest = st.defer(rest)
        if callable(getattr(weights, "built", None)):  # lazy_receive.BucketViews
            st.counts["views"] += weights.built()
            st.counts["lazy_tensors"] += len(weights)
        if rest:
            st.counts["verl_calls"] += 1
            return orig_update(self, rest, peft_config, base_sync_done)
        return None

    cls.update_weights_from_ipc = update_weights_from_ipc
    cls._update_weights = _update_weights
    setattr(cls, FLAG, True)
