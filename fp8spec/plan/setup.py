"""The inputs of a rollout engine's memory model, from a spec (verl's defaults) or given explicitly, and its result.

Every input vLLM's start-up arithmetic depends on is a field, so the planner can compute exactly the
configuration a measurement used (tests/data/vllm024_h200_kv_capacity.json) as well as a spec's run. Each
engine's model is in its folder (fp8spec/engines/<name>/memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.facts import gpu_memory

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


class PlanInputError(ValueError):
    """An input the planner cannot work with (unknown GPU memory, impossible override); one sentence."""


@dataclass(frozen=True)
class EngineSetup:
    engine: str  # an fp8spec.engines name
    engine_version: str
    gpu: str
    total_bytes: int
    sms: Optional[int]
    utilization: float
    tp: int
    ep: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    cuda_graphs: bool
    kv_dtype: str  # "bf16" | "fp8_e4m3" | "fp8_e5m2"
    defaults: str  # where max_num_* / max_model_len / cuda_graphs came from
    sync_bucket_bytes: Optional[int] = None  # the weight-sync bucket on each trainer GPU (None: not modelled)

    @property
    def gpus_per_replica(self) -> int:
        """verl builds each replica from tp x dp GPUs, with ep = tp x dp when expert parallel."""
        return max(self.tp, self.ep)

    def with_kv_dtype(self, kv_dtype: str) -> "EngineSetup":
        return replace(self, kv_dtype=kv_dtype)


@dataclass(frozen=True)
class EngineMemory:
    requested: int
    weights: int
    activation_peak: int
    non_torch: int
    cudagraph: int
    runner: str
    detail: dict = field(default_factory=dict)
    # allocator blocks the weight load leaves cached (reserved, not free) when the engine sizes its KV pool
    load_cache: int = 0

    @property
    def available_kv(self) -> int:
        return (
            self.requested
            - self.weights
            - self.activation_peak
            - self.non_torch
            - self.cudagraph
            - self.load_cache
        )


@dataclass(frozen=True)
class Overrides:
    """Command-line overrides of the spec's engine setup (None keeps the spec's / verl's value)."""

    gpu_memory_gib: Optional[float] = None
    gpu_memory_utilization: Optional[float] = None
    tp: Optional[int] = None
    ep: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_model_len: Optional[int] = None
    cuda_graphs: Optional[bool] = None


def unknown_gpu_memory(gpu: str) -> str:
    return (
        f"the memory of hardware.gpu {gpu!r} is not recorded (fp8spec/data/gpu_memory.yaml): state it as "
        "hardware.gpu_memory_gib, or pass --gpu-memory-gib"
    )


def setup_from_spec(ctx: ResolvedSpec, overrides: Overrides = Overrides()) -> EngineSetup:
    """The engine of one rollout replica as verl 0.9.1 starts it for this spec (rollout defaults from the
    verl profile's memory.rollout_engine_defaults), with ``overrides`` applied."""
    spec, model = ctx.spec, ctx.known_model
    gpu = gpu_memory(spec.hardware.gpu)
    total = gpu.total_bytes
    stated = overrides.gpu_memory_gib or spec.hardware.gpu_memory_gib  # the command line, then the spec
    if stated is not None:
        total = int(stated * (1 << 30))
    if total is None:
        raise PlanInputError(unknown_gpu_memory(spec.hardware.gpu))
    verl = ctx.profile("verl")
    if verl is None or not verl.has("memory.rollout_engine_defaults"):
        raise PlanInputError(
            f"the verl {spec.stack.verl} profile has no rollout engine defaults "
            "(memory.rollout_engine_defaults)"
        )
    d = verl.value("memory.rollout_engine_defaults")
    r = spec.rollout
    # command line, then the spec, then what verl passes when the spec leaves the field out
    max_model_len = overrides.max_model_len or r.max_model_len or model.max_position_embeddings
    if max_model_len is None:
        raise PlanInputError(f"{model.id} has no max_position_embeddings; pass --max-model-len")
    return EngineSetup(
        engine=r.engine,
        engine_version=getattr(spec.stack, r.engine),
        gpu=spec.hardware.gpu,
        total_bytes=total,
        sms=gpu.sms,
        utilization=overrides.gpu_memory_utilization or r.gpu_memory_utilization,
        tp=overrides.tp or r.tp,
        ep=overrides.ep or r.ep,
        max_num_batched_tokens=overrides.max_num_batched_tokens
        or r.max_num_batched_tokens
        or int(d["max_num_batched_tokens"]),
        max_num_seqs=overrides.max_num_seqs or r.max_num_seqs or int(d["max_num_seqs"]),
        max_model_len=max_model_len,
        cuda_graphs=(not d["enforce_eager"]) if overrides.cuda_graphs is None else overrides.cuda_graphs,
        kv_dtype=spec.kv_cache.dtype,
        defaults=_defaults_source(r, spec.stack.verl),
        sync_bucket_bytes=(r.sync_bucket_mb or int(d["update_weights_bucket_megabytes"])) << 20,
    )


def _defaults_source(r, verl_version: str) -> str:
    """Where the engine's length and batch settings come from: the spec's fields where set, verl's defaults."""
    fields = ("max_model_len", "max_num_seqs", "max_num_batched_tokens")
    own = [f"rollout.{f}" for f in fields if getattr(r, f) is not None]
    base = f"verl {verl_version} rollout defaults"
    return f"{', '.join(own)} from the spec, else {base}" if own else base
