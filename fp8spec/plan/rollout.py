"""The rollout engine of one replica, side by side for BF16 and FP8 choices: weights, KV memory, capacity,
concurrency and whether the step's sequences fit without preemption."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.engine_memory import memory_model
from fp8spec.plan.kv import KVCapacity, kv_bytes_per_token_layer, kv_capacity
from fp8spec.plan.setup import EngineMemory, EngineSetup
from fp8spec.plan.weights import Sharding, WeightBytes, rollout_weight_bytes

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.facts import ProfileFacts
    from fp8spec.resolve.context import ResolvedSpec


@dataclass(frozen=True)
class Choice:
    key: str  # "bf16" | "fp8" | "fp8_kv" | "kv"
    label: str
    quantized: Optional[frozenset[str]]  # FP8 linears, None = BF16 weights (a shared object: cache keys)
    kv_dtype: str


@dataclass(frozen=True)
class RolloutResult:
    choice: Choice
    is_spec: bool
    weights: WeightBytes
    memory: EngineMemory
    kv: KVCapacity
    seq_len: int  # prompt + response
    sequences_per_replica: int
    running: int  # sequences the engine runs at once (max_num_seqs caps them)

    @property
    def concurrency(self) -> float:
        return self.kv.concurrency_at(self.seq_len)

    @property
    def fits_without_preemption(self) -> bool:
        return self.kv.num_blocks > 0 and self.concurrency >= self.running

    @property
    def kv_shortfall(self) -> Optional[str]:
        """Why vLLM would refuse to start ("no_kv_memory", "below_one_request"), or None."""
        if self.memory.available_kv <= 0:
            return "no_kv_memory"
        if self.kv.one_request_bytes > self.memory.available_kv:
            return "below_one_request"
        return None


def memory_facts(setup: EngineSetup) -> ProfileFacts:
    """The memory.* profile facts the engine's model reads (fp8spec/engines/<name>/memory.py)."""
    return memory_model(setup.engine).memory_facts(setup.engine_version)


def choices(ctx: ResolvedSpec) -> list[tuple[Choice, bool]]:
    """BF16, FP8 W8A8, FP8 W8A8 + FP8 KV, and the spec's own choice if it is none of these."""
    spec, model = ctx.spec, ctx.model
    if spec.linear.quantize:
        quantized = ctx.exclusions.quantized_names
    else:  # what the default exclusions (lm_head, embeddings, norms, router) would quantize
        quantized = _default_quantized(model)
    fp8_kv = spec.kv_cache.dtype if spec.kv_cache.fp8 else "fp8_e4m3"
    options = [
        Choice("bf16", "BF16", None, "bf16"),
        Choice("fp8", "FP8 W8A8", quantized, "bf16"),
        Choice("fp8_kv", f"FP8 W8A8 + {fp8_kv} KV", quantized, fp8_kv),
    ]
    spec_key = {(False, False): "bf16", (True, False): "fp8", (True, True): "fp8_kv"}.get(
        (spec.linear.quantize, spec.kv_cache.fp8), "kv"
    )
    if spec_key == "kv":
        options.append(Choice("kv", f"BF16 + {spec.kv_cache.dtype} KV", None, spec.kv_cache.dtype))
    return [(c, c.key == spec_key) for c in options]


@lru_cache(maxsize=8)
def _default_quantized(model: ModelFacts) -> frozenset[str]:
    return frozenset(m.name for m in model.linear_modules() if m.kind not in ("lm_head", "router"))


def plan_choice(
    model: ModelFacts,
    setup: EngineSetup,
    choice: Choice,
    *,
    seq_len: int,
    sequences: int,
    is_spec: bool = False,
) -> RolloutResult:
    facts = memory_facts(setup)
    shard = Sharding(setup.tp, setup.ep)
    weights = rollout_weight_bytes(
        model, shard, choice.quantized, vocab_padding=facts.value("memory.vocab_padding")
    )
    s = setup.with_kv_dtype(choice.kv_dtype)
    memory, block = memory_model(s.engine).engine_memory(
        model, s, weights.total, facts, None if choice.quantized is None else frozenset(choice.quantized)
    )
    dtype_bytes = facts.value("memory.kv_dtype_bytes")["bf16" if s.kv_dtype == "bf16" else s.kv_dtype]
    per_layer = kv_bytes_per_token_layer(model, s.tp, dtype_bytes)
    kv = kv_capacity(memory.available_kv, per_layer, model.num_hidden_layers, block, s.max_model_len)
    return RolloutResult(
        choice, is_spec, weights, memory, kv, seq_len, sequences, min(sequences, s.max_num_seqs)
    )


def rollout_plan(ctx: ResolvedSpec, setup: EngineSetup) -> list[RolloutResult]:
    spec = ctx.spec
    replicas = max(1, spec.world_size // setup.gpus_per_replica)
    total = spec.algorithm.train_batch_size * spec.rollout.n
    per_replica = -(-total // replicas)
    # verl cuts generation at max_model_len - prompt (vllm_async_server.py:593), so no sequence is longer
    seq_len = min(spec.rollout.max_prompt_length + spec.rollout.max_response_length, setup.max_model_len)
    return [
        plan_choice(ctx.known_model, setup, c, seq_len=seq_len, sequences=per_replica, is_spec=is_spec)
        for c, is_spec in choices(ctx)
    ]
