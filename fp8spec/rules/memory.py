"""Memory feasibility: the planner's model of trainer and rollout memory (fp8spec.plan) as rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule, rule_hint

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

_GMU = "rollout.gpu_memory_utilization"


def _check(ctx, verdict_fn, path: str, candidates=None):
    """The verdict as a finding. With ``candidates(plan, verdict)`` the hint proposes those of them that pass
    every rule (the verdict's own arithmetic only suggests them), else the rule's general fix; without, it is
    the verdict's fix text (bounds, not values to set)."""
    from fp8spec.plan.plan import cached_plan

    plan = cached_plan(ctx)
    if plan is None:
        return
    verdict = verdict_fn(plan)
    if verdict is None or verdict.ok:
        return
    if candidates is None:
        yield Finding(verdict.message, path, verdict.fix or None)
        return
    code = verdict.code
    # acknowledged: information, so the planner's own reading of the situation; otherwise values are proposed
    # only if they pass every rule, and the rule's general fix stands in when none does
    otherwise = verdict.fix if code in ctx.spec.acknowledge and verdict.fix else rule_hint(code)
    hint, ok = proposal(ctx, code, path, candidates(plan, verdict), otherwise)
    yield Finding(verdict.message, path, hint or None, ok)


def _shorter_context(plan) -> list[dict]:
    """rollout.max_model_len at prompt + response when the engine reserves for longer requests (verl passes the
    model's whole context by default): vLLM then needs KV room for one shorter request only."""
    r = plan.spec.rollout
    need = r.max_prompt_length + r.max_response_length
    return [{"rollout.max_model_len": need}] if need < plan.setup.max_model_len else []


def _fewer_seqs(plan) -> list[dict]:
    """rollout.max_num_seqs at the sequences the KV cache holds at full length: no preemption, fewer at once."""
    r = plan.spec_rollout
    fit = int(r.concurrency)
    return [{"rollout.max_num_seqs": fit}] if 1 <= fit < r.running else []


def _bigger_tps(plan) -> list[dict]:
    return [{"rollout.tp": tp} for tp in (2, 4, 8) if plan.setup.tp < tp <= plan.gpus_per_node]


@rule(
    "MEM001",
    "trainer-state-exceeds-gpu",
    "error",
    "The trainer's parameters, gradients and optimizer state do not fit one GPU.",
    """Training holds parameters, gradients and optimizer state on the GPU at once: verl's offload options
    move them to CPU only between training passes (verl/workers/engine/base.py:300-335).
    verl's FSDP actor keeps fp32 parameters, fp32 gradients and AdamW's two fp32 moments sharded over all GPUs
    (16 bytes per parameter / world: verl/workers/config/engine.py:287-289); its Megatron actor keeps bf16
    parameters and an fp32 grad buffer per model-parallel rank and the distributed optimizer's 12 bytes over
    data parallelism (verl transformer_impl.py:453-460, megatron distrib_optimizer.py). The DeepSeek-V3 (671B)
    end-to-end run on 4x8 H200 needs about twice the cluster's HBM for this alone.""",
    "use more GPUs or a layout that shards the state further (the message gives the lower bound)",
)
def trainer_state_exceeds_gpu(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import trainer_state

    yield from _check(ctx, trainer_state, "training")


@rule(
    "MEM002",
    "rollout-no-kv-memory",
    "error",
    "The rollout engine has no KV-cache room for one request at its memory utilisation.",
    """vLLM 0.24 gives the KV cache ceil(total x gpu_memory_utilization) minus weights, the profiled
    activation peak, non-torch memory and its CUDA-graph estimate (vllm/v1/worker/gpu_worker.py:432-493);
    with nothing left it raises 'No available memory for the cache blocks', and when one request of
    max_model_len tokens does not fit, 'To serve at least one request with the model's max seq len'
    (vllm/v1/core/kv_cache_utils.py:733-770). verl sets max_model_len to the model's
    max_position_embeddings unless rollout.max_model_len says otherwise.""",
    "raise rollout.gpu_memory_utilization or rollout.tp, set rollout.max_model_len to max_prompt_length + "
    "max_response_length, or quantize the linears (linear.quantize: true)",
)
def rollout_no_kv_memory(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import rollout_weights

    def candidates(plan, verdict):
        util = verdict.numbers.get("min_utilization", 2.0)
        out = [{_GMU: util}] if util <= 1.0 else []
        out += _shorter_context(plan)
        out += _bigger_tps(plan)
        if not plan.spec.linear.quantize:
            out.append({"linear.quantize": True})
        return out

    yield from _check(ctx, rollout_weights, _GMU, candidates)


@rule(
    "MEM003",
    "rollout-beside-trainer-exceeds-gpu",
    "error",
    "The trainer's resident memory plus the rollout engine's share exceed the GPU.",
    """In verl's colocated mode the trainer's parameters and optimizer state stay on the GPU while the engine
    generates unless offloaded (verl/workers/engine_workers.py:768-826; param_offload and optimizer_offload
    default to false). vLLM then requests total x gpu_memory_utilization and refuses to start when less is
    free ('Free memory on device ... is less than desired GPU memory utilization',
    vllm/v1/worker/utils.py:405-425); when it wakes its KV cache after a step the same memory must be free.""",
    "lower rollout.gpu_memory_utilization, or offload trainer state (training.offload.optimizer / .params: true)",
)
def rollout_beside_trainer(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import colocation

    def candidates(plan, verdict):
        util = verdict.numbers.get("max_utilization", 0.0)
        out = [{_GMU: util}] if util > 0 else []
        offload = ctx.spec.training.offload
        if not offload.optimizer:
            out.append({"training.offload.optimizer": True})
        if not offload.params:
            out.append({"training.offload.params": True})
        if not offload.optimizer and not offload.params:
            out.append({"training.offload.optimizer": True, "training.offload.params": True})
        return out

    yield from _check(ctx, colocation, _GMU, candidates)


@rule(
    "MEM004",
    "heavy-preemption",
    "warning",
    "The KV cache holds fewer than half of the sequences the engine runs at full length.",
    """verl sends train_batch_size x n sequences split over the rollout replicas, and vLLM admits up to
    max_num_seqs of them (verl default 256) as long as their prompts fit; as responses grow the KV cache
    runs out and vLLM preempts and recomputes sequences. The FP8-RL paper measured frequent preemption at
    20K-token responses with a BF16 KV cache and attributed FP8 KV's 38% rollout speed-up to avoiding it.
    Capacity here is vLLM 0.24's (GPU KV cache size) for the spec's FP8 choices.""",
    "use an FP8 KV cache (kv_cache.dtype: fp8_e4m3), a larger rollout.tp or gpu_memory_utilization, fewer "
    "sequences at once (rollout.max_num_seqs), or shorter responses",
    acknowledgeable=True,
)
def heavy_preemption(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import preemption

    def candidates(plan, verdict):
        out: list[dict[str, object]] = []
        if ctx.spec.kv_cache.dtype == "bf16":
            out.append({"kv_cache.dtype": "fp8_e4m3"})
        if not ctx.spec.linear.quantize:
            out.append({"linear.quantize": True})
        return out + _bigger_tps(plan) + _fewer_seqs(plan)

    yield from _check(ctx, preemption, "rollout.max_response_length", candidates)


@rule(
    "MEM005",
    "trainer-activations-exceed-gpu",
    "warning",
    "The estimated training peak, activations included, exceeds the GPU.",
    """Besides its state the trainer holds one micro-batch's activations (bf16 layer tensors per token, after
    Korthikanti et al. 2022, divided by TP under sequence parallelism, kept only at layer inputs with verl
    FSDP's gradient checkpointing) and its logits (bf16 logits, fp32 log-probabilities and the logit
    gradient: 8 bytes per token and vocabulary entry). These are estimates, so this is a warning.""",
    "lower the micro-batch (or dynamic-batching token budget), shorten rollout.max_response_length, or shard "
    "activations further (Megatron: a larger training.parallel.tp, pp or cp)",
)
def trainer_activations_exceed_gpu(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import trainer_activations

    def candidates(plan, verdict):
        # a shorter response shrinks the longest micro-batch (activations and logits grow with its tokens)
        shorter = [{"rollout.max_response_length": ctx.spec.rollout.max_response_length // d} for d in (2, 4)]
        if ctx.spec.training.backend != "megatron":
            return shorter
        p, gpn, world = ctx.spec.training.parallel, ctx.spec.hardware.gpus_per_node, ctx.spec.world_size
        out = [{"training.parallel.tp": t} for t in (2, 4, 8) if p.tp < t <= gpn]
        out += [{"training.parallel.pp": n} for n in (2, 4) if p.pp < n and world % n == 0]
        out += [{"training.parallel.cp": 2}] if p.cp == 1 else []
        return out + shorter

    yield from _check(ctx, trainer_activations, "algorithm.ppo_micro_batch_size_per_gpu", candidates)
