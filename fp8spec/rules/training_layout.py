"""The per-module training precision layout (training.bf16_modules) against the trainer, the recipe and the model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import MEGATRON_FP8, MOE, Examples, fragment
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "TRN008",
    "bf16-modules-need-fp8-megatron",
    "error",
    "training.bf16_modules is set without end-to-end FP8 training on the Megatron trainer.",
    """The layout keeps module classes in BF16 while the rest of the model trains in FP8: it is compiled into
    megatron-core's per-module quant_recipe (megatron/core/transformer/transformer_config.py:1108, matched per module
    in gpt_model.py:284-287) by the runtime patch module_precision, and that recipe only overrides an FP8 autocast
    (extensions/transformer_engine.py:275-285). verl's FSDP trainer has no TransformerEngine and no FP8 training
    (TRN001), and with training.precision bf16 every module already trains in BF16: the field would do nothing.""",
    "remove training.bf16_modules, or train end-to-end FP8 on Megatron (training.precision: fp8 with "
    "training.backend: megatron; not checked here: its memory plan differs, validate again)",
    needs_model=False,
    examples=Examples(
        bad={"training": {"bf16_modules": ["attention"]}},
        good=fragment(MEGATRON_FP8, {"training": {"bf16_modules": ["attention"]}}),
        message="needs training.precision fp8 on the megatron trainer",
    ),
)
def bf16_modules_need_fp8_megatron(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if t.bf16_modules and not (t.precision == "fp8" and ctx.trainer.fp8_training):
        yield Finding(
            f"training.bf16_modules needs training.precision fp8 on the megatron trainer (this spec: "
            f"precision {t.precision}, backend {t.backend})",
            "training.bf16_modules",
        )


@rule(
    "TRN009",
    "bf16-modules-not-in-model",
    "warning",
    "training.bf16_modules names a module class the model does not have.",
    """Each class is a glob over megatron-core's module names (backends/megatron-core profile,
    quant.module_classes): experts and shared_experts exist only in MoE layers (moe_layer.py:326, :338), dense_mlp
    only in dense layers. A class the model lacks matches no module, so nothing runs in BF16 for it: a dense model
    with "experts" BF16 trains exactly as all-FP8, which is rarely what the author meant.""",
    "remove the class from training.bf16_modules (`fp8spec explain` lists the model's classes)",
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"bf16_modules": ["experts"]}}),
        good=fragment(MOE, MEGATRON_FP8, {"training": {"bf16_modules": ["experts"]}}),
        message="has no experts",
    ),
)
def bf16_modules_not_in_model(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.precision_layout import model_classes

    if not ctx.spec.training.bf16_modules:
        return
    present = model_classes(ctx.known_model)
    for cls in ctx.spec.training.bf16_modules:
        if cls not in present:
            yield Finding(
                f"training.bf16_modules names {cls}, but {ctx.known_model.id} has no {cls} (its classes: "
                f"{', '.join(present)})",
                "training.bf16_modules",
            )


@rule(
    "TRN010",
    "bf16-modules-with-delayed",
    "error",
    "A per-module BF16 layout is not compiled for delayed FP8 scaling.",
    """megatron-core scopes per-module quantization to the stateless recipes: its per-module config refuses delayed
    scaling ("Delayed scaling not in scope of te per-module quantization config.", extensions/transformer_engine.py:154),
    its first/last BF16 layers refuse it too (transformer_config.py:1258-1261, rule TRN003), and with delayed scaling
    TransformerBlock opens one FP8 autocast around every layer instead of one per layer
    (transformer_block.py:603-607). fp8spec compiles the layout for the per-layer contexts of the stateless recipes
    only, the ones it was measured with (blockwise, tensorwise: docs/results.md#trainer-layer-cost).""",
    "use training.fp8_scaling: blockwise (or tensorwise), or remove training.bf16_modules",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"fp8_scaling": "delayed", "bf16_modules": ["attention"]}}),
        good=fragment(
            MEGATRON_FP8, {"training": {"fp8_scaling": "blockwise", "bf16_modules": ["attention"]}}
        ),
        message="delayed",
    ),
)
def bf16_modules_with_delayed(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if t.bf16_modules and t.precision == "fp8" and t.fp8_scaling == "delayed":
        yield Finding(
            "training.bf16_modules cannot be combined with delayed FP8 scaling", "training.fp8_scaling"
        )


@rule(
    "TRN011",
    "fp8-config-without-fp8-modules",
    "warning",
    "The layout keeps every module class of the model in BF16, yet the run pays FP8 training's overheads.",
    """With training.precision fp8 the bundle sets TransformerConfig.fp8, and that flag costs whatever the
    modules run in: megatron-core pads every expert's tokens for FP8 (moe/experts.py:287-293, :660-669;
    moe_utils.py:1340-1373), verl pads each packed sequence for FP8 (verl/models/mcore/model_forward.py:58-59,
    util.py:50-93). The bf16-fp8pad
    control of the layout benchmark (FP8 config, every TE module BF16) spent 611 ms of GPU time per step against
    539 ms for BF16 training on the Qwen3-30B-A3B shape (docs/results.md#trainer-layer-cost). A layout with no
    FP8 module left is BF16 training with extra padding.""",
    "train in BF16 (training.precision: bf16 together with training.bf16_modules removed; not checked here: "
    "validate again); the FP8 rollout stays",
    examples=Examples(
        bad=fragment(MOE, MEGATRON_FP8, {"training": {"bf16_modules": ["attention", "experts"]}}),
        good=fragment(MOE, MEGATRON_FP8, {"training": {"bf16_modules": ["experts"]}}),
        message="no module class left in FP8",
    ),
)
def fp8_config_without_fp8_modules(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.precision_layout import model_classes

    t = ctx.spec.training
    if not (t.bf16_modules and t.precision == "fp8"):
        return
    present = model_classes(ctx.known_model)
    if present and set(present) <= set(t.bf16_modules):
        yield Finding(
            f"training.bf16_modules keeps {', '.join(present)} in BF16: no module class left in FP8, but the "
            "FP8 config still pads every expert's and every sequence's tokens",
            "training.bf16_modules",
        )


@rule(
    "TRN013",
    "expert-gemm-without-effect",
    "warning",
    "training.expert_gemm cutlass is set where TransformerEngine does not use its CUTLASS grouped GEMM.",
    """TransformerEngine reads NVTE_USE_CUTLASS_GROUPED_GEMM at every grouped GEMM and takes the CUTLASS path
    only on compute capability 9.0, for BF16 or FP16 operands whose groups share the inner dimension
    (transformer_engine/common/gemm/cublaslt_gemm.cu nvte_multi_tensor_gemm; backends/transformer-engine:
    env.cutlass_grouped_gemm). Grouped GEMMs exist only in the MoE experts of the Megatron trainer (TEGroupedLinear);
    verl's FSDP trainer has no TransformerEngine, a dense model has no experts, FP8-trained experts feed FP8 operands,
    and other GPUs ignore the variable. In each of these the run is the cuBLAS one the spec seems to avoid.""",
    "remove training.expert_gemm, or train the experts in BF16 (training.precision: bf16, or experts in "
    "training.bf16_modules) on the Megatron trainer of an MoE model on a Hopper GPU",
    examples=Examples(
        bad=fragment(MOE, MEGATRON_FP8, {"training": {"expert_gemm": "cutlass"}}),
        good=fragment(
            MOE, MEGATRON_FP8, {"training": {"expert_gemm": "cutlass", "bf16_modules": ["experts"]}}
        ),
        message="trains the experts in FP8",
    ),
)
def expert_gemm_without_effect(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.precision_layout import cutlass_experts_unused

    if ctx.spec.training.expert_gemm != "cutlass":
        return
    why = cutlass_experts_unused(ctx.spec, ctx.known_model, ctx.gpu)
    if not why:
        return
    yield Finding(f"training.expert_gemm cutlass has no effect: {why}", "training.expert_gemm")
