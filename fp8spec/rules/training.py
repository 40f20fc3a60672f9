"""FP8 training (Megatron + TransformerEngine)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import MEGATRON_FP8, MOE, Examples, fragment
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "TRN001",
    "fp8-training-needs-megatron",
    "error",
    "FP8 training needs the Megatron trainer.",
    """verl's FSDP backend has no FP8 training: FP8 end-to-end runs through Megatron-core's
    override_transformer_config (fp8, fp8_recipe) and TransformerEngine (verl #4223,
    docs/low_precision/fp8.md). With FSDP, FP8 applies to the rollout only.""",
    "set training.precision: bf16 (FP8 then applies to the rollout only), or train on Megatron "
    "(training.backend: megatron or --backend megatron+<engine>; not checked here: its memory plan differs, validate again)",
    needs_model=False,
    examples=Examples(
        bad={"training": {"precision": "fp8"}}, good=MEGATRON_FP8, message="needs training.backend megatron"
    ),
)
def fp8_training_needs_megatron(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if t.precision == "fp8" and not ctx.trainer.fp8_training:
        yield Finding(
            f"training.precision fp8 needs training.backend megatron, not {t.backend}", "training.precision"
        )


@rule(
    "TRN002",
    "pure-e4m3-recipe",
    "warning",
    "Pure E4M3 FP8 training is less stable than the hybrid recipe.",
    """The FP8-RL paper's MoE run with E4M3 gradients collapsed near step 500, while the hybrid recipe
    (E4M3 forward, E5M2 gradients) stayed aligned with BF16; TransformerEngine #2754 reports the same
    blockwise loss gap. verl's recipe comments: "hybrid works better ... trains more stably".""",
    "set training.fp8_recipe: hybrid",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"fp8_recipe": "e4m3"}}),
        good=fragment(MEGATRON_FP8, {"training": {"fp8_recipe": "hybrid"}}),
        message="collapse",
    ),
)
def pure_e4m3(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if t.precision == "fp8" and t.fp8_recipe == "e4m3":
        moe = " on an MoE model" if ctx.model is not None and ctx.model.is_moe else ""
        yield Finding(
            f"training.fp8_recipe e4m3{moe} risks late-training collapse; hybrid is the paper's recipe",
            "training.fp8_recipe",
        )


@rule(
    "TRN003",
    "bf16-layers-with-delayed",
    "error",
    "BF16 first/last layers are not supported with delayed scaling.",
    """Megatron-core's TransformerConfig raises "Delayed scaling does not support first / last layer in
    BF16." when first_last_layers_bf16 is combined with fp8_recipe delayed.""",
    "use training.fp8_scaling: blockwise, or set linear.bf16_first_layers/bf16_last_layers to 0",
    needs_model=False,
    examples=Examples(
        bad=fragment(
            MEGATRON_FP8, {"training": {"fp8_scaling": "delayed"}, "linear": {"bf16_first_layers": 1}}
        ),
        good=fragment(
            MEGATRON_FP8, {"training": {"fp8_scaling": "blockwise"}, "linear": {"bf16_first_layers": 1}}
        ),
        message="delayed",
    ),
)
def bf16_layers_with_delayed(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if (
        spec.training.precision == "fp8"
        and spec.training.fp8_scaling == "delayed"
        and (spec.linear.bf16_first_layers or spec.linear.bf16_last_layers)
    ):
        yield Finding(
            "BF16 first/last layers cannot be combined with delayed FP8 scaling", "training.fp8_scaling"
        )


@rule(
    "TRN004",
    "router-dtype-mismatch",
    "warning",
    "The trainer's router precision differs from the rollout engine's.",
    """vLLM and SGLang compute the MoE router in the model dtype (BF16). A trainer with an FP32 router
    picks different experts for the same tokens, which shows up as rollout/trainer mismatch
    (prime-rl #3524: 3,866 of 6,396 tokens mismatched until both sides matched). verl's FP8 recipe leaves
    moe_router_dtype unset for this reason.""",
    "keep training.router_dtype: bf16 unless the engine also routes in FP32",
    examples=Examples(
        bad=fragment(MOE, MEGATRON_FP8, {"training": {"router_dtype": "fp32"}}),
        good=fragment(MOE, MEGATRON_FP8, {"training": {"router_dtype": "bf16"}}),
        message="routes in bf16",
    ),
)
def router_dtype_mismatch(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if ctx.known_model.is_moe and ctx.trainer.router_dtype and spec.training.router_dtype == "fp32":
        yield Finding(
            f"training.router_dtype fp32 while {ctx.engine.name} routes in bf16", "training.router_dtype"
        )


# attn_implementation values of a Hugging Face model that have no Megatron meaning
HF_ONLY_ATTENTION = ("sdpa", "eager", "flex_attention")


@rule(
    "TRN005",
    "attention-value-of-fsdp-on-megatron",
    "warning",
    "training.attention names a Hugging Face attention (sdpa, eager, flex_attention) for the Megatron trainer.",
    """sdpa, eager and flex_attention compile to actor_rollout_ref.model.override_config.attn_implementation, which verl reads
    only when it builds the Hugging Face model of the FSDP engine (verl/workers/config/model.py:185). The
    Megatron trainer runs TransformerEngine attention chosen by override_transformer_config.attention_backend
    (verl's default flash needs the flash-attn package; verl/trainer/config/engine/megatron.yaml:90), so the
    value has no effect there and does not spare a node without flash-attn.""",
    "use training.attention: fused (TransformerEngine's cuDNN attention, no flash-attn needed) or "
    "flash_attention_2",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"attention": "sdpa"}}),
        good=fragment(MEGATRON_FP8, {"training": {"attention": "fused"}}),
        message="no effect on the Megatron trainer",
    ),
)
def attention_value_of_fsdp_on_megatron(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if not ctx.trainer.hf_model and t.attention in HF_ONLY_ATTENTION:
        yield Finding(
            f"training.attention {t.attention} has no effect on the Megatron trainer", "training.attention"
        )


@rule(
    "TRN006",
    "attention-value-of-megatron-on-fsdp",
    "error",
    "training.attention names a TransformerEngine attention backend (fused, unfused) for the FSDP trainer.",
    """fused and unfused are Megatron's AttnBackend values (megatron/core/transformer/enums.py:51-58), set
    through override_transformer_config.attention_backend. The FSDP trainer builds a Hugging Face model whose
    attn_implementation takes flash_attention_2, sdpa, eager or flex_attention; transformers refuses any other
    name at the model's init.""",
    "use training.attention: sdpa (no flash-attn needed) or flash_attention_2 on the FSDP trainer",
    needs_model=False,
    examples=Examples(
        bad={"training": {"attention": "fused"}},
        good={"training": {"attention": "sdpa"}},
        message="is a Megatron attention backend",
    ),
)
def attention_value_of_megatron_on_fsdp(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if ctx.trainer.hf_model and t.attention in ("fused", "unfused"):
        yield Finding(
            f"training.attention {t.attention} is a Megatron attention backend; the FSDP trainer's Hugging Face "
            "model has no such attention",
            "training.attention",
        )


@rule(
    "TRN012",
    "gradient-checkpointing-on-megatron",
    "warning",
    "training.gradient_checkpointing is set for the Megatron trainer, which does not read it.",
    """The field compiles to actor_rollout_ref.model.enable_gradient_checkpointing, which verl's FSDP engine
    reads (verl/workers/engine/fsdp/transformer_impl.py:335) and its Megatron engine never does
    (backends/verl: key.model_gradient_checkpointing). Megatron recomputes activations only through its own
    recompute settings, which fp8spec does not set, so the spec would promise memory or speed the run does not
    get, and fp8spec plan would plan the wrong activations.""",
    "remove training.gradient_checkpointing from a Megatron spec",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"gradient_checkpointing": False}}),
        good=MEGATRON_FP8,
        message="verl's Megatron engine does not read",
    ),
)
def gradient_checkpointing_on_megatron(ctx: ResolvedSpec) -> Iterator[Finding]:
    yield from _hf_model_field(
        ctx,
        "gradient_checkpointing",
        "verl's Megatron engine does not read model.enable_gradient_checkpointing",
    )


def _hf_model_field(ctx: ResolvedSpec, name: str, why: str) -> Iterator[Finding]:
    """A training field compiled for the Hugging Face model of verl's FSDP engine, set on a trainer without one."""
    value = getattr(ctx.spec.training, name)
    if value is not None and not ctx.trainer.hf_model:
        yield Finding(f"training.{name} {str(value).lower()} has no effect: {why}", f"training.{name}")


@rule(
    "TRN014",
    "fused-logprob-on-megatron",
    "warning",
    "training.fused_logprob is set for the Megatron trainer, which fp8spec does not compile it for.",
    """The field compiles to actor_rollout_ref.model.use_fused_kernels with the torch backend, which verl's FSDP
    engine applies to its Hugging Face model (verl/workers/engine/fsdp/transformer_impl.py:318-330; backends/verl:
    key.model_use_fused_kernels). verl's Megatron engine computes log-probs through its own fused paths over
    Megatron's vocabulary-parallel output layer; fp8spec sets nothing for it, so the spec would promise a
    log-prob path the run does not take.""",
    "remove training.fused_logprob from a Megatron spec",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"fused_logprob": True}}),
        good=MEGATRON_FP8,
        message="is compiled for the FSDP trainer only",
    ),
)
def fused_logprob_on_megatron(ctx: ResolvedSpec) -> Iterator[Finding]:
    yield from _hf_model_field(
        ctx, "fused_logprob", "it is compiled for the FSDP trainer only (model.use_fused_kernels)"
    )


# a layout spec trains in BF16 only with its layout removed too (TRN008), a change of two fields
_TRN007_LAYOUT_HINT = (
    "remove training.bf16_modules and set the precision to bf16 to train in BF16 with the FP8 rollout kept; keep "
    "the layout if its lower rollout/trainer mismatch is what you want (acknowledge TRN007); training.priority "
    "picks the advice"
)
_TRN007_HINT = (
    "training.precision: bf16 keeps the FP8 rollout (W8A8, FP8 KV) and trains in BF16; training.bf16_modules keeps "
    "the slow classes in BF16 (Qwen3-30B-A3B: experts); keep fp8 if its lower rollout/trainer mismatch is what you "
    "want (acknowledge TRN007); training.priority picks the advice"
)


def _grouped_gemm_layout(ctx: ResolvedSpec):
    """FP8 with BF16 experts over BF16, both on TE's CUTLASS grouped GEMM, where that figure applies (an MoE on
    Hopper); None elsewhere."""
    from fp8spec.plan.facts import measured

    if not (ctx.known_model.is_moe and ctx.gpu.cc == (9, 0)):
        return None
    return float(measured("grouped_gemm.qwen3_30b_a3b.fp8_experts_bf16_vs_bf16"))


def _loop_figure(ctx: ResolvedSpec) -> str:
    """End-to-end FP8 against BF16 training with the same FP8 rollout (what the hint proposes) in the whole RL
    step, for an MoE on Hopper (verl main_ppo, 9 Qwen3-30B-A3B layers, one H200, one sequence per micro-batch);
    empty elsewhere."""
    from fp8spec.plan.facts import measured

    if not (ctx.known_model.is_moe and ctx.gpu.cc == (9, 0)):
        return ""
    _, rollout_update, e2e_update = measured("real_step.moe9l_variants.update_s")
    _, rollout_step, e2e_step = measured("real_step.moe9l_variants.step_s")
    return (
        f"; in the RL loop (verl main_ppo, 9 Qwen3-30B-A3B layers on one H200) its update took "
        f"{e2e_update / rollout_update:.2f}x and its step {e2e_step / rollout_step:.2f}x as long as BF16 training's "
        "with the same FP8 rollout (measured:real_step.moe9l_variants.step_s, docs/results.md#real-size-rl-step)"
    )


@rule(
    "TRN007",
    "fp8-training-measured-slower",
    "warning",
    "End-to-end FP8 training was measured slower than BF16 for this model class.",
    """The layer benchmark in the real stack (megatron-core 0.18.2 + TransformerEngine 2.20.2 on an H200,
    docs/results.md#trainer-layer-cost) has a Qwen3-30B-A3B MoE layer 19-36 % slower in FP8 blockwise than in BF16
    (small per-expert GEMMs do not pay for the quantization of activations, weights and gradients) while a dense
    Qwen3-8B layer gains 19 % at 22.5K-token micro-batches. Users report both signs (the FP8-RL paper: about 20 %
    less learner time; verl #7232: end-to-end FP8 slower for Qwen3-30B-A3B on H200). The FP8 rollout's gain does
    not depend on the trainer's precision. A figure covers only the measured layer's architecture on the GPU
    generation it ran on (fp8spec/data/trainer_gains.yaml, classes); for any other model or GPU the rule stays
    quiet and `fp8spec plan` says "not measured". Per training layout on RL-shaped packed batches
    (fp8spec/data/trainer_layouts.yaml): Qwen3-8B blockwise 1.25x, tensorwise 1.40x BF16's tokens/s; Qwen3-30B-A3B
    in GPU time blockwise 0.82x, experts BF16 0.94x (its wall clock is host-bound). The finding's hint lists every
    measured layout of the spec's model class and the fastest that keeps training.priority (mismatch: no module
    class trained in another precision than the rollout runs it; speed: any); a spec with training.bf16_modules is
    judged by its layout's own figure. On Hopper, an MoE layout with the experts BF16 and training.expert_gemm
    cutlass is judged by its wall-clock figure on that kernel against BF16 on it (1.06x, 4-layer Qwen3-30B-A3B
    stack; docs/results.md, the experts' GEMM kernel). For an MoE on Hopper the finding also gives the whole RL
    step's figure: verl main_ppo with 9 Qwen3-30B-A3B layers on one H200 ran the update 2.05x and the step 1.90x
    as long as BF16 training with the same FP8 rollout (docs/results.md#real-size-rl-step).""",
    _TRN007_HINT,
    acknowledgeable=True,
    examples=Examples(
        bad=fragment(MOE, MEGATRON_FP8), good=MEGATRON_FP8, message="layer speed for this model class"
    ),
)
def fp8_training_measured_slower(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.gain import trainer_gain
    from fp8spec.plan.precision_layout import layout_metric, layout_speeds, layouts_text, spec_layout

    t = ctx.spec.training
    if not ctx.trainer.fp8_training or t.precision != "fp8":
        return
    speeds = layout_speeds(ctx.known_model, ctx.gpu.arch)
    advice = layouts_text(ctx, speeds)
    grouped = _grouped_gemm_layout(ctx)
    hint = f"{advice}. {_TRN007_LAYOUT_HINT if t.bf16_modules else _TRN007_HINT}" if advice else None
    if hint and grouped is not None:
        hint += (
            f"; with the CUTLASS grouped GEMM on both sides (training.expert_gemm cutlass), FP8 with the experts BF16 measured "
            f"{grouped:.2f}x BF16 in wall clock (measured:grouped_gemm.qwen3_30b_a3b.fp8_experts_bf16_vs_bf16)"
        )
    if t.bf16_modules:  # a layout: its own measured figure, or none (the one-layer figures are all-FP8)
        own = spec_layout(ctx.spec, speeds)
        if (
            own is not None
            and grouped is not None
            and "experts" in t.bf16_modules
            and t.expert_gemm == "cutlass"
        ):
            return  # the experts-BF16 layout on the CUTLASS grouped GEMM was measured faster than BF16 on it
        if own is not None and own.ratio < 1.0:
            yield Finding(
                f"training layout {own.label} measured at {own.ratio:.2f}x BF16 training for this model class "
                f"({layout_metric(ctx.known_model)}, docs/results.md#trainer-layer-cost)",
                "training.bf16_modules",
                hint,
            )
        return
    tokens = ctx.spec.rollout.max_prompt_length + ctx.spec.rollout.max_response_length
    g = trainer_gain(ctx.known_model, ctx.gpu.arch, t.fp8_scaling, tokens)
    if g is not None and g.ratio < 1.0:
        yield Finding(
            f"training.precision fp8 ({t.fp8_scaling}) measured at {g.ratio:.2f}x BF16's layer speed for this "
            f"model class ({g.workload}, docs/results.md#trainer-layer-cost){_loop_figure(ctx)}",
            "training.precision",
            hint,
        )
