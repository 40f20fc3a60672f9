"""The Megatron trainer's layout, checked the way megatron-core checks it at start-up.

Each rule mirrors one refusal of megatron-core (0.16.1 on CPU proves it, tests/conformance/
test_megatron_layout.py; 0.18.2 / 0.19.2 lines in backends/megatron-core/*.yaml rule.layout_*): a layout is
refused here iff megatron-core refuses it. Messages carry the arithmetic and the values that would work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import MEGATRON_FP8, MEGATRON_TP1, MOE, Examples, fragment
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule
from fp8spec.trainers.megatron.layout import divisors, stage_layers, uneven_split

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

_P = "training.parallel."


def _megatron(ctx) -> bool:
    return bool(ctx.trainer.parallel_layout)


def _join(values) -> str:
    return ", ".join(map(str, values)) or "none"


@rule(
    "PAR001",
    "trainer-layout-indivisible",
    "error",
    "The GPU count is not divisible by the Megatron parallel layout.",
    """megatron-core's initialize_model_parallel raises "world_size (W) is not divisible by M" when
    tp*cp*pp does not divide the GPUs, and "... not divisible by expert_tensor_model_pipeline_parallel size"
    when etp*ep*pp does not (parallel_state.py; megatron-core 0.18.2 :733-790). verl's validate_config asserts
    the first too. verl leaves expert_tensor_parallel_size null, which megatron-core reads as etp = tp.""",
    "set the training.parallel values the hint lists (each passes every rule; etp 1 for MoE models)",
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"parallel": {"tp": 3}}}),
        good=fragment(MEGATRON_FP8, {"training": {"parallel": {"tp": 2}}}),
        message="not divisible by tp*cp*pp = 3*1*1 = 3",
    ),
)
def trainer_layout(ctx: ResolvedSpec) -> Iterator[Finding]:
    if not _megatron(ctx):
        return
    m = ctx.megatron
    if m.world % m.model_size:
        candidates = (
            [{_P + "tp": t} for t in divisors(m.world)]
            + [{_P + "pp": p} for p in divisors(m.world)]
            + [{_P + "cp": c} for c in divisors(m.world)]
        )
        hint, ok = proposal(
            ctx,
            "PAR001",
            "training.parallel",
            candidates,
            f"tp*cp*pp must be one of {_join(divisors(m.world))}",
        )
        yield Finding(
            f"{m.world} GPUs are not divisible by tp*cp*pp = {m.tp}*{m.cp}*{m.pp} = {m.model_size}; "
            f"tp*cp*pp must divide them",
            "training.parallel",
            hint,
            ok,
        )
    if m.world % m.expert_model_size:
        etp = f"etp {m.expert_tp}" + (" (unset, so it follows tp)" if m.etp is None else "")
        path = (
            "training.parallel.etp" if ctx.spec.training.parallel.etp is not None else "training.parallel.ep"
        )
        candidates = [{_P + "etp": e} for e in divisors(m.world)] + [
            {_P + "ep": e} for e in divisors(m.world)
        ]
        hint, ok = proposal(ctx, "PAR001", path, candidates, f"etp*ep*pp must divide the {m.world} GPUs")
        yield Finding(
            f"{m.world} GPUs are not divisible by etp*ep*pp = {m.expert_tp}*{m.ep}*{m.pp} = "
            f"{m.expert_model_size} ({etp})",
            path,
            hint,
            ok,
        )


@rule(
    "PAR008",
    "pipeline-layers-indivisible",
    "error",
    "The decoder layers do not split over the pipeline stages.",
    """Without first/last stage layer counts megatron-core builds num_layers / pp layers per stage and
    asserts "num_layers should be divisible by pipeline_model_parallel_size" when it builds the model
    (transformer_block.get_num_layers_to_build). With num_layers_in_first/last_pipeline_stage, the remaining
    layers must split evenly over the middle stages (TransformerConfig "Uneven PP": "number of layers at
    middle stage ... must be divisible", "Mismatch: ... middle layers remaining"). A first and last stage on
    pp 1 is accepted but builds only the last stage's layers, a wrong model.""",
    "set the pp, or the first_stage_layers / last_stage_layers, the hint lists (each passes every rule)",
    examples=Examples(
        bad=fragment(MEGATRON_TP1, {"training": {"parallel": {"pp": 8}}}),
        good=fragment(
            MEGATRON_TP1,
            {"training": {"parallel": {"pp": 8, "first_stage_layers": 6, "last_stage_layers": 6}}},
        ),
        message="num_layers 36 is not divisible by pp 8",
    ),
)
def pipeline_layers(ctx: ResolvedSpec) -> Iterator[Finding]:
    if not _megatron(ctx):
        return
    m, layers = ctx.megatron, ctx.known_model.num_hidden_layers
    _, problem = stage_layers(layers, m.pp, m.first_stage_layers, m.last_stage_layers)
    if not problem:
        return
    candidates = []
    if not m.uneven:
        candidates += [{_P + "pp": d} for d in divisors(layers) if d <= m.world]
    split = uneven_split(layers, m.pp)
    if split:
        candidates.append({_P + "first_stage_layers": split[0], _P + "last_stage_layers": split[1]})
    where = (
        "training.parallel.first_stage_layers"
        if m.first_stage_layers is not None
        else (
            "training.parallel.last_stage_layers"
            if m.last_stage_layers is not None
            else "training.parallel.pp"
        )
    )
    hint, ok = proposal(
        ctx,
        "PAR008",
        where,
        candidates,
        f"pp must divide {layers}, or the first/last stages take the layers the middle stages cannot split",
    )
    yield Finding(f"{ctx.known_model.id} at pp {m.pp}: {problem}", where, hint, ok)


@rule(
    "PAR009",
    "experts-indivisible-by-ep",
    "error",
    "The routed experts do not split over the trainer's expert parallelism.",
    """Every expert-parallel rank holds num_moe_experts / ep experts: megatron-core's BaseMoELayer asserts
    num_moe_experts % expert_model_parallel_size == 0 when it builds each MoE layer (moe/moe_layer.py:185).""",
    "set training.parallel.ep to a value the hint lists (each passes every rule)",
    examples=Examples(
        bad=fragment(MOE, MEGATRON_TP1, {"hardware": {"nodes": 3}, "training": {"parallel": {"ep": 24}}}),
        good=fragment(MOE, MEGATRON_TP1, {"hardware": {"nodes": 3}, "training": {"parallel": {"ep": 8}}}),
        message="128 experts of Qwen/Qwen3-30B-A3B-Base are not divisible by ep 24",
    ),
)
def experts_by_ep(ctx: ResolvedSpec) -> Iterator[Finding]:
    model = ctx.known_model
    if not _megatron(ctx) or not model.is_moe:
        return
    m = ctx.megatron
    if model.num_experts % m.ep:
        hint, ok = proposal(
            ctx,
            "PAR009",
            _P + "ep",
            ({_P + "ep": e} for e in divisors(model.num_experts)),
            f"ep must divide the {model.num_experts} experts and etp*ep*pp the {m.world} GPUs",
        )
        yield Finding(
            f"{model.num_experts} experts of {model.id} are not divisible by ep {m.ep}", _P + "ep", hint, ok
        )


@rule(
    "PAR010",
    "ep-without-experts",
    "error",
    "Expert parallelism on a model without experts.",
    """megatron-core's TransformerConfig raises "num_moe_experts must be non None to use expert-parallel."
    when expert_model_parallel_size > 1 and the model has no MoE layers.""",
    "set training.parallel.ep: 1 for a dense model",
    examples=Examples(
        bad=fragment(MEGATRON_TP1, {"training": {"parallel": {"ep": 2}}}),
        good=fragment(MEGATRON_TP1, MOE, {"training": {"parallel": {"ep": 2}}}),
        message="has no experts",
    ),
)
def ep_without_experts(ctx: ResolvedSpec) -> Iterator[Finding]:
    if _megatron(ctx) and not ctx.known_model.is_moe and ctx.spec.training.parallel.ep > 1:
        hint, ok = proposal(
            ctx,
            "PAR010",
            _P + "ep",
            [{_P + "ep": 1}],
            "set training.parallel.ep: 1, then fix the layout errors reported with it",
        )
        yield Finding(
            f"{ctx.known_model.id} has no experts, but training.parallel.ep is {ctx.spec.training.parallel.ep}",
            _P + "ep",
            hint,
            ok,
        )


@rule(
    "PAR011",
    "trainer-heads-indivisible",
    "error",
    "Attention heads do not split over the trainer's tensor parallelism.",
    """megatron-core's TransformerConfig raises "num_attention_heads (H) must be a multiple of
    tensor_model_parallel_size (T)" and "num_query_groups (G) must be a multiple or divisor of
    tensor_model_parallel_size (T)" (KV heads are Megatron's query groups).""",
    "set training.parallel.tp to a value the hint lists (each passes every rule)",
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"hardware": {"nodes": 3}, "training": {"parallel": {"tp": 3}}}),
        good=fragment(MEGATRON_FP8, {"hardware": {"nodes": 3}, "training": {"parallel": {"tp": 2}}}),
        message="32 attention heads of Qwen/Qwen3-8B-Base are not divisible by training tp 3",
    ),
)
def trainer_heads(ctx: ResolvedSpec) -> Iterator[Finding]:
    if not _megatron(ctx):
        return
    m, model = ctx.megatron, ctx.known_model
    heads, groups = model.num_attention_heads, model.num_key_value_heads
    hint, ok = "", ()
    if heads % m.tp or (groups % m.tp and m.tp % groups):
        hint, ok = proposal(
            ctx,
            "PAR011",
            _P + "tp",
            ({_P + "tp": t} for t in divisors(m.world)),
            "training tp must divide the attention heads, and divide or be divided by the KV heads",
        )
    if heads % m.tp:
        yield Finding(
            f"{heads} attention heads of {model.id} are not divisible by training tp {m.tp}",
            _P + "tp",
            hint,
            ok,
        )
    elif groups % m.tp and m.tp % groups:
        yield Finding(
            f"{groups} query groups (KV heads) of {model.id} and training tp {m.tp}: neither divides the "
            "other",
            _P + "tp",
            hint,
            ok,
        )
