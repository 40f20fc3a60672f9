"""Parallel layouts and batch sizes, checked the way verl, Megatron and the engines check them at start-up."""

from __future__ import annotations

from math import gcd
from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _value_finding(ctx, code: str, message: str, field: str, candidates, what: str) -> Finding:
    """A finding at ``field`` whose hint proposes the candidate values of that field that pass every rule."""
    hint, ok = proposal(ctx, code, field, ({field: v} for v in candidates), what)
    return Finding(message, field, hint, ok)


@rule(
    "PAR002",
    "rollout-tp-indivisible",
    "error",
    "Rollout tensor parallelism does not fit the GPUs.",
    """Each rollout replica takes rollout.tp GPUs; verl builds replicas from all trainer GPUs, so the GPU
    count must be a multiple of rollout.tp (and of tp*ep with expert parallelism), and a replica must fit
    in one node's GPUs.""",
    "set rollout.tp (or rollout.ep) to a value the hint lists: each passes every rule",
    needs_model=False,
    scope="engine",
    examples=Examples(
        bad={"rollout": {"tp": 3}}, good={"rollout": {"tp": 2}}, message="not divisible by rollout.tp 3"
    ),
)
def rollout_tp(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    r = spec.rollout
    gpn = spec.hardware.gpus_per_node
    tps = [t for t in _divisors(gpn) if spec.world_size % t == 0]
    what = f"rollout.tp must divide the {spec.world_size} GPUs and fit in a node of {gpn}"
    if spec.world_size % r.tp:
        yield _value_finding(
            ctx,
            "PAR002",
            f"{spec.world_size} GPUs are not divisible by rollout.tp {r.tp}",
            "rollout.tp",
            tps,
            what,
        )
    elif r.tp > gpn:
        yield _value_finding(
            ctx,
            "PAR002",
            f"rollout.tp {r.tp} is larger than gpus_per_node {gpn}: a replica must fit in one node",
            "rollout.tp",
            tps,
            what,
        )
    eps = [e for e in _divisors(spec.world_size) if e > 1 and e % r.tp == 0]
    if r.ep > 1 and spec.world_size % r.ep:
        yield _value_finding(
            ctx,
            "PAR002",
            f"{spec.world_size} GPUs are not divisible by rollout.ep {r.ep}",
            "rollout.ep",
            eps + [1],
            f"rollout.ep must divide the {spec.world_size} GPUs",
        )
    elif r.ep > 1 and r.ep % r.tp:
        yield _value_finding(
            ctx,
            "PAR002",
            f"rollout.ep {r.ep} must be tp x dp, a multiple of rollout.tp {r.tp} "
            "(verl RolloutConfig: expert_parallel_size == tensor_model_parallel_size * "
            "data_parallel_size)",
            "rollout.ep",
            eps + [1],
            f"rollout.ep must be a multiple of {r.tp}",
        )


@rule(
    "PAR003",
    "rollout-pp-unsupported",
    "error",
    "Pipeline parallelism is not supported in the rollout engine.",
    """verl's RolloutConfig.__post_init__ raises NotImplementedError for pipeline_model_parallel_size > 1
    with vllm, sglang and trtllm (verl/workers/config/rollout.py).""",
    "set rollout.pp: 1 and use rollout.tp / rollout.ep",
    needs_model=False,
    scope="engine",
    examples=Examples(bad={"rollout": {"pp": 2}}, good={"rollout": {"pp": 1}}, message="rollout.pp 2"),
)
def rollout_pp(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.rollout.pp > 1:
        yield Finding(f"rollout.pp {ctx.spec.rollout.pp} is not supported", "rollout.pp")


@rule(
    "PAR004",
    "batch-indivisible",
    "error",
    "Batch sizes do not divide the way verl requires.",
    """verl's validate_config asserts "real_train_batch_size (train_batch_size * n) must be divisible by
    minimal possible batch size" (n_gpus for FSDP; megatron_dp * ppo_micro_batch_size_per_gpu for
    Megatron; verl/utils/config.py), and ActorConfig.validate requires train_batch_size >=
    ppo_mini_batch_size (verl/workers/config/actor.py). Both are skipped with use_dynamic_bsz.""",
    "set the batch size the hint names (each value passes every rule), or algorithm.use_dynamic_bsz: true",
    needs_model=False,
    examples=Examples(
        bad={"algorithm": {"train_batch_size": 3, "use_dynamic_bsz": False}, "rollout": {"n": 1}},
        good={"algorithm": {"train_batch_size": 32, "use_dynamic_bsz": False}, "rollout": {"n": 1}},
        message="not divisible by 8",
    ),
)
def batch_indivisible(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    a = spec.algorithm
    if a.use_dynamic_bsz:
        return
    world = spec.world_size
    if ctx.trainer.parallel_layout:
        p = spec.training.parallel
        if world % (p.tp * p.pp * p.cp):
            return  # PAR001 reports the layout
        minimal = world // (p.tp * p.pp * p.cp) * a.ppo_micro_batch_size_per_gpu
    else:
        minimal = world
    real = a.train_batch_size * spec.rollout.n
    if real % minimal:
        # train_batch_size * n is a multiple of `minimal` exactly when train_batch_size is a multiple of `step`
        step = minimal // gcd(minimal, spec.rollout.n)
        below, above = a.train_batch_size // step * step, (a.train_batch_size // step + 1) * step
        yield _value_finding(
            ctx,
            "PAR004",
            f"train_batch_size * n = {a.train_batch_size} * {spec.rollout.n} = "
            f"{real} is not divisible by {minimal}",
            "algorithm.train_batch_size",
            [v for v in (below, above) if v > 0],
            "set algorithm.use_dynamic_bsz: true",
        )
    if a.train_batch_size < a.ppo_mini_batch_size:
        field = "algorithm.ppo_mini_batch_size"
        smaller = list(_divisors(a.train_batch_size))[::-1][:4]
        found = _value_finding(
            ctx,
            "PAR004",
            f"ppo_mini_batch_size {a.ppo_mini_batch_size} is larger than "
            f"train_batch_size {a.train_batch_size}",
            field,
            smaller,
            "raise algorithm.train_batch_size",
        )
        if not found.proposals:
            hint, ok = proposal(
                ctx,
                "PAR004",
                field,
                [{"algorithm.train_batch_size": a.ppo_mini_batch_size}],
                found.hint or "",
            )
            found = Finding(found.message, field, hint, ok)
        yield found


@rule(
    "PAR005",
    "bf16-layers-exceed-model",
    "error",
    "More BF16 first/last layers than the model has.",
    """Megatron-core requires num_layers_at_start_in_bf16 and num_layers_at_end_in_bf16 to lie within
    [0, num_layers // pipeline_model_parallel_size] (TransformerConfig.__post_init__); together they must
    leave at least one FP8 layer, or FP8 does nothing.""",
    "lower linear.bf16_first_layers / bf16_last_layers",
    examples=Examples(
        bad={"linear": {"bf16_first_layers": 20, "bf16_last_layers": 16}},
        good={"linear": {"bf16_first_layers": 2, "bf16_last_layers": 2}},
        message="cover all 36 layers",
    ),
)
def bf16_layers(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, model = ctx.spec, ctx.known_model
    first, last = spec.linear.bf16_first_layers, spec.linear.bf16_last_layers
    layers = model.num_hidden_layers
    if first + last >= layers and (first or last):
        yield Finding(
            f"bf16_first_layers {first} + bf16_last_layers {last} cover all {layers} layers of {model.id}",
            "linear.bf16_first_layers",
        )
    elif ctx.trainer.parallel_layout and spec.training.precision == "fp8":
        per_stage = layers // spec.training.parallel.pp
        for name, value in (("bf16_first_layers", first), ("bf16_last_layers", last)):
            if value > per_stage:
                yield Finding(f"{name} {value} exceeds num_layers // pp = {per_stage}", f"linear.{name}")


@rule(
    "PAR006",
    "heads-indivisible",
    "error",
    "Attention heads do not split over the rollout tensor parallelism.",
    """vLLM requires num_attention_heads % tp == 0, and for KV heads either kv_heads % tp == 0 or
    tp % kv_heads == 0 (then KV heads are replicated); SGLang has the same checks.""",
    "set rollout.tp to a value the hint lists: each passes every rule",
    scope="engine",
    examples=Examples(
        bad={"model": {"name": "Qwen/Qwen2.5-7B", "path": "/m"}, "rollout": {"tp": 8}},
        good={"model": {"name": "Qwen/Qwen2.5-7B", "path": "/m"}, "rollout": {"tp": 4}},
        message="28 attention heads",
    ),
)
def heads_indivisible(ctx: ResolvedSpec) -> Iterator[Finding]:
    model, tp = ctx.known_model, ctx.spec.rollout.tp
    gpn = ctx.spec.hardware.gpus_per_node
    heads, kv = model.num_attention_heads, model.num_key_value_heads

    def splits(t: int) -> bool:
        return heads % t == 0 and (model.attention == "mla" or kv % t == 0 or t % kv == 0)

    tps = [t for t in _divisors(gpn) if splits(t)]
    what = f"{model.id}'s heads split evenly over rollout.tp {', '.join(map(str, tps)) or 'none of the node sizes'}"
    if heads % tp:
        yield _value_finding(
            ctx,
            "PAR006",
            f"{heads} attention heads are not divisible by rollout.tp {tp}",
            "rollout.tp",
            tps,
            what,
        )
    elif model.attention != "mla" and kv % tp and tp % kv:
        yield _value_finding(
            ctx,
            "PAR006",
            f"{kv} KV heads and rollout.tp {tp}: neither divides the other",
            "rollout.tp",
            tps,
            what,
        )


@rule(
    "PAR007",
    "fsdp-ignores-parallel",
    "warning",
    "training.parallel is ignored by the FSDP trainer.",
    """verl's FSDP engine shards parameters over all GPUs; tensor, pipeline, expert and context parallel
    sizes, expert tensor parallelism and uneven pipeline stages apply only to the Megatron engine
    (actor.megatron.*), so a spec written for Megatron and compiled for FSDP (--backend fsdp+...) runs
    without its layout.""",
    "remove training.parallel, or use Megatron (training.backend: megatron or --backend megatron+<engine>"
    "; not checked here: its memory plan differs, validate again)",
    needs_model=False,
    examples=Examples(
        bad={"training": {"parallel": {"tp": 2}}},
        good={"training": {"parallel": {"tp": 1}}},
        message="no effect",
    ),
)
def fsdp_ignores_parallel(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    p = spec.training.parallel
    if ctx.trainer.parallel_layout:
        return
    set_fields = [f"{name} {getattr(p, name)}" for name in ("tp", "pp", "ep", "cp") if getattr(p, name) != 1]
    set_fields += [
        f"{name} {getattr(p, name)}"
        for name in ("etp", "first_stage_layers", "last_stage_layers")
        if getattr(p, name) is not None
    ]
    if set_fields:
        yield Finding(
            f"training.parallel ({', '.join(set_fields)}) has no effect with training.backend fsdp",
            "training.parallel",
        )
