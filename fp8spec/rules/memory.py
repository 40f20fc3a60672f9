"""Memory feasibility: the planner's model of trainer and rollout memory (fp8spec.plan) as rules.

Each rule is one verdict of fp8spec.plan.feasibility; its hint is the verdict's advice, and every value the
advice names is applied and validated before it is printed (fp8spec.rules.plan_advice), the same text
`fp8spec plan` prints on its fix lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

from fp8spec.rules.examples import DEEPSEEK_E2E, MEGATRON_FP8, MOE, Examples, fragment
from fp8spec.rules.plan_advice import advised, proposal_costs
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


def no_memory_plan(ctx: ResolvedSpec) -> Optional[str]:
    """Why a rule that judges the memory plan cannot run on ``ctx`` (its ``skip_when``), or None."""
    from fp8spec.plan.plan import plan_problem

    return plan_problem(ctx)


def _check(ctx: ResolvedSpec, verdict_fn) -> Iterator[Finding]:
    from fp8spec.plan.plan import spec_memory_plan

    plan = spec_memory_plan(ctx)
    if plan is None:
        return
    verdict = verdict_fn(plan)
    if verdict is None or verdict.ok:
        return
    hint, ok = advised(ctx, verdict)
    yield Finding(verdict.message, verdict.path, hint or None, ok, proposal_costs(verdict, ok))


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
    skip_when=no_memory_plan,
    examples=Examples(
        bad=DEEPSEEK_E2E,
        good=fragment(MOE, MEGATRON_FP8, {"training": {"parallel": {"ep": 8}}}),
        message="but a h200 holds",
    ),
)
def trainer_state_exceeds_gpu(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import trainer_state

    yield from _check(ctx, trainer_state)


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
    "raise rollout.gpu_memory_utilization or rollout.tp, lower rollout.max_model_len toward max_prompt_length + "
    "max_response_length, or quantize the linears (linear.quantize: true)",
    skip_when=no_memory_plan,
    examples=Examples(
        bad={"rollout": {"tp": 1, "gpu_memory_utilization": 0.1}, "linear": {"quantize": False}},
        good={"rollout": {"tp": 1, "gpu_memory_utilization": 0.6}, "linear": {"quantize": False}},
        message="no memory left for the KV cache",
    ),
)
def rollout_no_kv_memory(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import rollout_weights

    yield from _check(ctx, rollout_weights)


@rule(
    "MEM003",
    "rollout-beside-trainer-exceeds-gpu",
    "error",
    "The trainer's resident memory plus the rollout engine's share exceed the GPU.",
    """In verl's colocated mode the trainer's parameters and optimizer state stay on the GPU while the engine
    generates unless offloaded (verl/workers/engine_workers.py:768-826; param_offload and optimizer_offload
    default to false). vLLM then requests total x gpu_memory_utilization and refuses to start when less is
    free ('Free memory on device ... is less than desired GPU memory utilization',
    vllm/v1/worker/utils.py:405-425); when it wakes its KV cache after a step the same memory must be free. The
    optimizer state appears at the first update, so a share that started can fail at step 2's wake-up (seen:
    docs/results.md#real-size-rl-step). Counted as measured there: the memory both processes hold beyond their
    state and share, and TE's FP8 weight copies, which verl frees only with param offload.""",
    "lower rollout.gpu_memory_utilization, or offload trainer state (training.offload.optimizer / .params: true)",
    skip_when=no_memory_plan,
    examples=Examples(
        bad={"rollout": {"gpu_memory_utilization": 0.9}},
        good={"rollout": {"gpu_memory_utilization": 0.9}, "training": {"offload": {"optimizer": True}}},
        message="less than desired GPU memory utilization",
    ),
)
def rollout_beside_trainer(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import colocation

    yield from _check(ctx, colocation)


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
    "use an FP8 KV cache, a larger rollout.tp or gpu_memory_utilization, fewer sequences at once "
    "(rollout.max_num_seqs), or shorter responses",
    acknowledgeable=True,
    skip_when=no_memory_plan,
    examples=Examples(
        bad={"rollout": {"max_response_length": 20480}},
        good={"rollout": {"max_response_length": 2048}},
        message="preempted",
    ),
)
def heavy_preemption(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import preemption

    yield from _check(ctx, preemption)


@rule(
    "MEM005",
    "trainer-activations-exceed-gpu",
    "warning",
    "The estimated training peak, activations included, exceeds the GPU.",
    """Besides its state the trainer holds one micro-batch's activations (bf16 layer tensors per token, after
    Korthikanti et al. 2022, divided by TP under sequence parallelism, kept only at layer inputs with verl
    FSDP's gradient checkpointing) and its logits (bf16 logits, fp32 log-probabilities and the logit
    gradient: 8 bytes per token and vocabulary entry), FSDP's gather buffers and the CUDA context; or, where
    larger, the optimizer step's temporaries, or the old-log-prob pass at its own token budget (no gradients,
    but a micro-batch's logits with the entropy's and log-probs' temporaries: backends/verl
    memory.log_prob_pass_logit_bytes). The message names every term and they sum to the peak. These are
    estimates, so within the margin of MEM006 this is a warning.""",
    "lower the micro-batch (or dynamic-batching token budget; where the old-log-prob pass sets the peak, its "
    "own budget), shorten rollout.max_response_length, or shard activations further (Megatron: a larger "
    "training.parallel.tp, pp or cp)",
    # two 22,528-token micro-batch rows: 86.6 GiB on a 79.2 GiB H100, within MEM006's 10 % margin
    skip_when=no_memory_plan,
    examples=Examples(
        bad={"algorithm": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2}},
        good={},
        message="estimated training peak",
    ),
)
def trainer_activations_exceed_gpu(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.training_peak import trainer_activations, trainer_peak_far_beyond

    def within_margin(plan):  # beyond the margin MEM006 reports it, as an error
        far = trainer_peak_far_beyond(plan)
        return None if far is not None and not far.ok else trainer_activations(plan)

    yield from _check(ctx, within_margin)


@rule(
    "MEM006",
    "trainer-peak-far-beyond-gpu",
    "error",
    "The estimated training peak exceeds the GPU by more than the estimate's margin.",
    """The training peak (state, activations, logits, gather buffers, CUDA context; see MEM005) is exact in
    its state and modelled in the rest. Within a margin of the GPU (fp8spec/data/memory_estimates.yaml
    trainer.peak_margin, 10 %: 25 times the planner's largest measured error, 0.4 % on the rollout engine,
    docs/results.md#rollout-throughput, and the room left to the unmeasured trainer terms) it is a warning (MEM005); beyond it the
    first long micro-batch runs out of memory on the cluster, so the spec is refused.""",
    "lower the micro-batch or the dynamic-batching token budget (not below one sequence), shorten "
    "rollout.max_response_length, shard activations further (Megatron: training.parallel.tp, pp or cp), or "
    "use more GPUs",
    # four rows: 155.3 GiB, beyond the margin; two stay within it (MEM005's warning, not this error)
    skip_when=no_memory_plan,
    examples=Examples(
        bad={"algorithm": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 4}},
        good={"algorithm": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2}},
        message="beyond it by more than 10%",
    ),
)
def trainer_peak_far_beyond_gpu(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.training_peak import trainer_peak_far_beyond

    yield from _check(ctx, trainer_peak_far_beyond)


@rule(
    "MEM007",
    "sync-bucket-exceeds-gpu",
    "error",
    "The weight-sync bucket does not fit beside the trainer and the engine's weights.",
    """At every colocated weight sync verl 0.9.1 resumes the engine's weights but not its KV cache
    (verl/workers/engine_workers.py:766-782), loads the trainer's parameters back if they were offloaded, and
    the sender allocates one bucket of rollout.sync_bucket_mb on the trainer's GPU
    (checkpoint_engine.update_weights_bucket_megabytes, default 2048; bucketed_weight_transfer.py _init_buffer).
    A bucket that does not fit beside them fails with CUDA out of memory at the first sync, after the first
    rollout and training pass. Larger buckets do make a sync cheaper (docs/results.md#weight-sync), so the largest that
    fits is the fix.""",
    "lower rollout.sync_bucket_mb (the message gives the memory it shares) or offload the optimizer",
    skip_when=no_memory_plan,
    examples=Examples(
        bad={"rollout": {"sync_bucket_mb": 65536}},
        good={"rollout": {"sync_bucket_mb": 8192}},
        message="the sync bucket 64.0 GiB",
    ),
)
def sync_bucket_exceeds_gpu(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.feasibility import colocation, sync_bucket

    def beside_a_fitting_trainer(plan):  # where the trainer does not fit beside the engine, MEM003 says so
        together = colocation(plan)
        return None if together is not None and not together.ok else sync_bucket(plan)

    yield from _check(ctx, beside_a_fitting_trainer)


@rule(
    "MEM008",
    "gpu-memory-unknown",
    "warning",
    "The GPU's memory is neither recorded nor stated: the memory rules (MEM001-MEM007) do not run.",
    """Every memory rule compares what the trainer and the engine keep on one GPU with the memory CUDA reports
    for it. fp8spec records that figure only where a CUDA print of it was found
    (fp8spec/data/gpu_memory.yaml, each figure with its source); for the other GPUs nothing would say whether
    the trainer fits, whether the engine has KV room at its gpu_memory_utilization, or whether a sync bucket
    fits, and a spec that runs out of memory on the first step would look as clean as one that fits. The rules
    are then reported as skipped, never as passed. Acknowledging it accepts running unchecked: the rules stay
    skipped, and reported so.""",
    "state the memory: hardware.gpu_memory_gib (torch.cuda.get_device_properties(0).total_memory / 2**30 "
    "on one of the GPUs), or acknowledge MEM008 to run without the memory rules",
    acknowledgeable=True,
    needs_model=False,
    examples=Examples(
        bad={"hardware": {"gpu": "h800"}},
        good={"hardware": {"gpu": "h800", "gpu_memory_gib": 79}},
        message="the memory of hardware.gpu 'h800' is not recorded",
    ),
)
def gpu_memory_unknown(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.facts import gpu_memory
    from fp8spec.plan.setup import unknown_gpu_memory

    hw = ctx.spec.hardware
    if hw.gpu_memory_gib is None and gpu_memory(hw.gpu).total_bytes is None:
        codes = ", ".join(c for c in _PLAN_RULES)
        yield Finding(f"{unknown_gpu_memory(hw.gpu)}; {codes} do not run", "hardware.gpu")


_PLAN_RULES = ("MEM001", "MEM002", "MEM003", "MEM004", "MEM005", "MEM006", "MEM007")
