"""Will the run fit? Verdicts over a plan, with the numbers and the settings that would fit.

The MEM rules (fp8spec/rules/memory.py) turn these into diagnostics; `fp8spec plan` prints them too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from fp8spec.engines import get_engine
from fp8spec.plan.facts import estimate

if TYPE_CHECKING:
    from fp8spec.plan.plan import Plan

GIB = 1 << 30
#: below this share of the running sequences fitting at full length, preemption is "heavy"
HEAVY_PREEMPTION_SHARE = 0.5


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class Verdict:
    code: str
    ok: bool
    message: str = ""
    fix: str = ""
    numbers: dict = field(default_factory=dict)


def trainer_state(plan: Plan) -> Optional[Verdict]:
    """MEM001: the optimizer step needs parameters, gradients and optimizer state on the GPU at once."""
    t = plan.trainer
    if t is None:
        return None
    usable = plan.total_bytes - t.context
    ok = t.state <= usable
    # a lower bound: every byte per parameter counted once over the cluster, as if perfectly sharded
    min_gpus = math.ceil(t.model_params * t.bytes_per_param / usable)
    gpn = plan.gpus_per_node
    fix = (
        f"the state needs at least {min_gpus} GPUs ({math.ceil(min_gpus / gpn)} nodes of {gpn}) even perfectly sharded "
        f"({t.bytes_per_param} bytes per parameter x {t.model_params / 1e9:.1f}B parameters)"
    )
    if t.backend == "megatron":
        fix += (
            "; a larger training.parallel.pp / ep (or tp) shrinks each GPU's model-parallel share, more "
            "nodes shrink the distributed-optimizer share"
        )
    else:
        fix += (
            "; training.backend megatron with the distributed optimizer needs 6 + 12/dp bytes per parameter"
        )
    msg = (
        f"trainer state per GPU is {gib(t.state)} (params {gib(t.params)}, grads {gib(t.grads)}, optimizer "
        f"{gib(t.optimizer)}"
        + (f", FP8 weight caches {gib(t.fp8_weight_cache)}" if t.fp8_weight_cache else "")
        + f") but a {plan.gpu} holds {gib(usable)} after the CUDA context"
    )
    return Verdict("MEM001", ok, msg, fix, {"state": t.state, "usable": usable, "min_gpus": min_gpus})


def rollout_weights(plan: Plan) -> Optional[Verdict]:
    """MEM002: the engine must keep KV memory for at least one max_model_len request at its utilisation."""
    r = plan.spec_rollout
    problem = {
        "no_kv_memory": "no memory left for the KV cache",
        "below_one_request": "the KV cache cannot hold one request of max_model_len tokens",
    }.get(r.kv_shortfall or "")
    if problem is None:
        return Verdict("MEM002", True)
    m = r.memory
    need = m.weights + m.activation_peak + m.non_torch + m.cudagraph + r.kv.one_request_bytes
    util = math.ceil(need / plan.total_bytes * 100) / 100
    msg = (
        f"rollout engine ({r.choice.label}) at gpu_memory_utilization {plan.setup.utilization:g}: "
        f"{problem}: requested {gib(m.requested)} - weights {gib(m.weights)} - activations {gib(m.activation_peak)}"
        f" - non-torch {gib(m.non_torch)} - CUDA graphs {gib(m.cudagraph)} = {gib(m.available_kv)}, one request "
        f"of {plan.setup.max_model_len} tokens needs {gib(r.kv.one_request_bytes)}"
    )
    fixes = []
    if util <= 1.0:
        fixes.append(f"rollout.gpu_memory_utilization >= {util:.2f}")
    need_len = plan.spec.rollout.max_prompt_length + plan.spec.rollout.max_response_length
    if need_len < plan.setup.max_model_len:
        fixes.append(f"rollout.max_model_len: {need_len} reserves KV for prompt + response only")
    bigger = [tp for tp in (2, 4, 8) if tp > plan.setup.tp and tp <= plan.gpus_per_node]
    if bigger:
        fixes.append(f"a larger rollout.tp ({', '.join(map(str, bigger))}) splits the weights")
    if not plan.spec.linear.quantize:
        fixes.append("linear.quantize: true halves the weights")
    return Verdict(
        "MEM002", False, msg, "; or ".join(fixes) or "use more GPUs per replica", {"min_utilization": util}
    )


def colocation(plan: Plan) -> Optional[Verdict]:
    """MEM003: what the trainer keeps on the GPU during rollout plus the engine's share must fit the GPU."""
    t = plan.trainer
    if t is None:
        return None
    engine_ctx = int(estimate("trainer", "cuda_context_bytes"))
    requested = plan.spec_rollout.memory.requested
    used = t.resident_during_rollout + engine_ctx + requested
    ok = plan.headroom(t) >= 0
    room = plan.total_bytes - t.resident_during_rollout - engine_ctx
    max_util = math.floor(max(room, 0) / plan.total_bytes * 100) / 100
    fixes = []
    if max_util > 0:
        fixes.append(f"rollout.gpu_memory_utilization <= {max_util:.2f}")
    for what, label in (
        ("optimizer", "training.offload.optimizer: true"),
        ("params", "training.offload.params: true"),
    ):
        if not t.offload.get(what):
            keep = (
                t.optimizer if what == "optimizer" else t.params + (t.grads if t.backend == "megatron" else 0)
            )
            fixes.append(f"{label} frees {gib(keep)} during rollout")
    refusal = get_engine(plan.setup.engine).start_refusal
    msg = (
        f"during rollout the trainer keeps {gib(t.resident_during_rollout)} per GPU (params, optimizer, CUDA "
        f"context) and the engine asks for {gib(requested)} (gpu_memory_utilization "
        f"{plan.setup.utilization:g}) plus its context: {gib(used)} on a {gib(plan.total_bytes)} GPU; {refusal}"
    )
    return Verdict("MEM003", ok, msg, "; or ".join(fixes), {"used": used, "max_utilization": max_util})


def preemption(plan: Plan) -> Optional[Verdict]:
    """MEM004: the KV cache holds fewer than half of the running sequences at full length."""
    r = plan.spec_rollout
    if r.kv_shortfall is not None or r.running == 0:
        return None
    share = r.concurrency / r.running
    ok = share >= HEAVY_PREEMPTION_SHARE
    fixes = []
    if r.choice.kv_dtype == "bf16":
        fp8 = next((x for x in plan.rollout if x.choice.key == "fp8_kv"), None)
        if fp8 is not None:
            fixes.append(f"kv_cache.dtype: fp8_e4m3 ({fp8.concurrency:.0f} sequences fit)")
    if not plan.spec.linear.quantize:
        fp8w = next((x for x in plan.rollout if x.choice.key == "fp8"), None)
        if fp8w is not None:
            fixes.append(f"linear.quantize: true ({fp8w.concurrency:.0f} fit)")
    if 1 <= int(r.concurrency) < r.running:
        fixes.append(f"rollout.max_num_seqs: {int(r.concurrency)} (all of them fit at full length)")
    fixes.append("a larger rollout.tp or gpu_memory_utilization, or a shorter max_response_length")
    msg = (
        f"the engine runs {r.running} sequences of up to {r.seq_len} tokens per replica but its KV cache "
        f"({r.kv.tokens:,} tokens) holds {r.concurrency:.0f} at full length ({share:.0%}): long responses "
        "will be preempted and recomputed"
    )
    return Verdict("MEM004", ok, msg, "; or ".join(fixes), {"share": share})


def trainer_activations(plan: Plan) -> Optional[Verdict]:
    """MEM005: the training peak, activations included (an estimate), exceeds the GPU."""
    t = plan.trainer
    if t is None:
        return None
    ok = t.peak <= plan.total_bytes
    msg = (
        f"estimated training peak per GPU is {gib(t.peak)} (state {gib(t.state)}, activations "
        f"{gib(t.activations)}, logits {gib(t.logits)}) on a {gib(plan.total_bytes)} GPU"
    )
    fix = (
        "lower algorithm.ppo_micro_batch_size_per_gpu or use dynamic batching with a smaller token budget; "
        "Megatron: raise training.parallel.tp (sequence parallel splits activations) or cp"
    )
    return Verdict("MEM005", ok, msg, fix, {"peak": t.peak})


def verdicts(plan: Plan) -> list[Verdict]:
    return [
        v
        for v in (
            trainer_state(plan),
            rollout_weights(plan),
            colocation(plan),
            preemption(plan),
            trainer_activations(plan),
        )
        if v is not None
    ]
