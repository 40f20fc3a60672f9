"""Parallel layouts and batch sizes, checked the way verl, Megatron and the engines check them at start-up."""

from __future__ import annotations

from fp8spec.rules.registry import Finding, rule


@rule(
    "PAR002", "rollout-tp-indivisible", "error",
    "Rollout tensor parallelism does not fit the GPUs.",
    """Each rollout replica takes rollout.tp GPUs; verl builds replicas from all trainer GPUs, so the GPU
    count must be a multiple of rollout.tp (and of tp*ep with expert parallelism), and a replica must fit
    in one node's GPUs.""",
    "choose a rollout.tp that divides gpus_per_node",
    needs_model=False,
)
def rollout_tp(ctx):
    spec = ctx.spec
    r = spec.rollout
    if spec.world_size % r.tp:
        yield Finding(f"{spec.world_size} GPUs are not divisible by rollout.tp {r.tp}", "rollout.tp")
    elif r.tp > spec.hardware.gpus_per_node:
        yield Finding(f"rollout.tp {r.tp} is larger than gpus_per_node {spec.hardware.gpus_per_node}", "rollout.tp")
    if r.ep > 1 and spec.world_size % (r.ep):
        yield Finding(f"{spec.world_size} GPUs are not divisible by rollout.ep {r.ep}", "rollout.ep")
    elif r.ep > 1 and r.ep % r.tp:
        yield Finding(f"rollout.ep {r.ep} must be tp x dp, a multiple of rollout.tp {r.tp} (verl RolloutConfig: "
                      "expert_parallel_size == tensor_model_parallel_size * data_parallel_size)", "rollout.ep")


@rule(
    "PAR003", "rollout-pp-unsupported", "error",
    "Pipeline parallelism is not supported in the rollout engine.",
    """verl's RolloutConfig.__post_init__ raises NotImplementedError for pipeline_model_parallel_size > 1
    with vllm, sglang and trtllm (verl/workers/config/rollout.py).""",
    "set rollout.pp: 1 and use rollout.tp / rollout.ep",
    needs_model=False,
)
def rollout_pp(ctx):
    if ctx.spec.rollout.pp > 1:
        yield Finding(f"rollout.pp {ctx.spec.rollout.pp} is not supported", "rollout.pp")


@rule(
    "PAR004", "batch-indivisible", "error",
    "Batch sizes do not divide the way verl requires.",
    """verl's validate_config asserts "real_train_batch_size (train_batch_size * n) must be divisible by
    minimal possible batch size" (n_gpus for FSDP; megatron_dp * ppo_micro_batch_size_per_gpu for
    Megatron; verl/utils/config.py), and ActorConfig.validate requires train_batch_size >=
    ppo_mini_batch_size (verl/workers/config/actor.py). Both are skipped with use_dynamic_bsz.""",
    "make algorithm.train_batch_size * rollout.n a multiple of the number in the message",
    needs_model=False,
)
def batch_indivisible(ctx):
    spec = ctx.spec
    a = spec.algorithm
    if a.use_dynamic_bsz:
        return
    world = spec.world_size
    if spec.training.backend == "megatron":
        p = spec.training.parallel
        if world % (p.tp * p.pp * p.cp):
            return  # PAR001 reports the layout
        minimal = world // (p.tp * p.pp * p.cp) * a.ppo_micro_batch_size_per_gpu
    else:
        minimal = world
    real = a.train_batch_size * spec.rollout.n
    if real % minimal:
        yield Finding(f"train_batch_size * n = {a.train_batch_size} * {spec.rollout.n} = {real} is not divisible "
                      f"by {minimal}", "algorithm.train_batch_size")
    if a.train_batch_size < a.ppo_mini_batch_size:
        yield Finding(f"train_batch_size {a.train_batch_size} is smaller than ppo_mini_batch_size "
                      f"{a.ppo_mini_batch_size}", "algorithm.ppo_mini_batch_size")


@rule(
    "PAR005", "bf16-layers-exceed-model", "error",
    "More BF16 first/last layers than the model has.",
    """Megatron-core requires num_layers_at_start_in_bf16 and num_layers_at_end_in_bf16 to lie within
    [0, num_layers // pipeline_model_parallel_size] (TransformerConfig.__post_init__); together they must
    leave at least one FP8 layer, or FP8 does nothing.""",
    "lower linear.bf16_first_layers / bf16_last_layers",
)
def bf16_layers(ctx):
    spec, model = ctx.spec, ctx.model
    first, last = spec.linear.bf16_first_layers, spec.linear.bf16_last_layers
    layers = model.num_hidden_layers
    if first + last >= layers and (first or last):
        yield Finding(f"bf16_first_layers {first} + bf16_last_layers {last} cover all {layers} layers of {model.id}",
                      "linear.bf16_first_layers")
    elif spec.training.backend == "megatron" and spec.training.precision == "fp8":
        per_stage = layers // spec.training.parallel.pp
        for name, value in (("bf16_first_layers", first), ("bf16_last_layers", last)):
            if value > per_stage:
                yield Finding(f"{name} {value} exceeds num_layers // pp = {per_stage}", f"linear.{name}")


@rule(
    "PAR006", "heads-indivisible", "error",
    "Attention heads do not split over the rollout tensor parallelism.",
    """vLLM requires num_attention_heads % tp == 0, and for KV heads either kv_heads % tp == 0 or
    tp % kv_heads == 0 (then KV heads are replicated); SGLang has the same checks.""",
    "choose a rollout.tp that divides the head counts in the message",
)
def heads_indivisible(ctx):
    model, tp = ctx.model, ctx.spec.rollout.tp
    if model.num_attention_heads % tp:
        yield Finding(f"{model.num_attention_heads} attention heads are not divisible by rollout.tp {tp}", "rollout.tp")
    kv = model.num_key_value_heads
    if model.attention != "mla" and kv % tp and tp % kv:
        yield Finding(f"{kv} KV heads and rollout.tp {tp}: neither divides the other", "rollout.tp")


@rule(
    "PAR007", "fsdp-ignores-parallel", "warning",
    "training.parallel is ignored by the FSDP trainer.",
    """verl's FSDP engine shards parameters over all GPUs; tensor, pipeline, expert and context parallel
    sizes apply only to the Megatron engine (actor.megatron.*_parallel_size).""",
    "remove training.parallel, or use training.backend: megatron",
    needs_model=False,
)
def fsdp_ignores_parallel(ctx):
    spec = ctx.spec
    p = spec.training.parallel
    if spec.training.backend == "fsdp" and (p.tp, p.pp, p.ep, p.cp) != (1, 1, 1, 1):
        yield Finding("training.parallel sizes other than 1 have no effect with training.backend fsdp",
                      "training.parallel")
