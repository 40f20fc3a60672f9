"""The training precision layout: which module classes train in FP8 (training.precision, fp8_scaling,
bf16_modules), how that compares with what the rollout runs in FP8 (linear.quantize, linear.exclude), and what each
measured layout costs in trainer speed (fp8spec/data/trainer_layouts.yaml). Rule TRN007, `fp8spec plan` and
`fp8spec explain` read it; nothing here is a setting of the bundle.

The first/last BF16 layers (linear.bf16_first_layers / bf16_last_layers) are one field for both sides, so they never
make the two sides differ and are left out of the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.facts import trainer_layouts
from fp8spec.plan.gain import trainer_gain_unmeasured
from fp8spec.specfile.training import TRAINING_MODULE_CLASSES
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.hardware import Gpu
    from fp8spec.resolve.context import ResolvedSpec
    from fp8spec.specfile.model import Spec

# The catalog's linear kinds (fp8spec/catalog/_layout.py) by training module class; routers, lm_head, MTP and
# vision linears belong to none (the trainer keeps them BF16 whatever the layout).
KIND_CLASS = {
    "attn_qkv": "attention",
    "attn_out": "attention",
    "mla_q": "attention",
    "mla_q_a": "attention",
    "mla_q_b": "attention",
    "mla_kv_a": "attention",
    "mla_kv_b": "attention",
    "mlp_in": "dense_mlp",
    "mlp_out": "dense_mlp",
    "expert_in": "experts",
    "expert_out": "experts",
    "shared_expert_in": "shared_experts",
    "shared_expert_out": "shared_experts",
}


@lru_cache(maxsize=32)
def model_classes(model: ModelFacts) -> tuple[str, ...]:
    """The module classes the model has linears of, in the spec's order (once per model: rules and probes ask)."""
    present = {KIND_CLASS.get(m.kind) for m in model.linear_modules() if m.layer is not None}
    return tuple(c for c in TRAINING_MODULE_CLASSES if c in present)


def fp8_trained(spec: Spec) -> bool:
    return spec.training.precision == "fp8" and get_trainer(spec.training.backend).fp8_training


def experts_train_bf16(spec: Spec) -> bool:
    """The spec's experts train in BF16: a BF16 trainer, or FP8 with the experts kept BF16."""
    t = spec.training
    return t.precision == "bf16" or "experts" in t.bf16_modules


def cutlass_experts_unused(spec: Spec, model: ModelFacts, gpu: Gpu) -> str:
    """Why TransformerEngine would not run this spec's experts on its CUTLASS grouped GEMM ('' when it would):
    TE uses it for BF16/FP16 grouped GEMMs on compute capability 9.0 only (the TE profile's
    env.cutlass_grouped_gemm), so it needs TE's trainer, an MoE, BF16 experts and a Hopper GPU."""
    if not get_trainer(
        spec.training.backend
    ).fp8_training:  # TE's trainer (Megatron) is the one that trains in FP8
        return f"the {spec.training.backend} trainer has no TransformerEngine grouped GEMM"
    if not model.is_moe:
        return f"{spec.model.name} has no experts"
    if not experts_train_bf16(spec):
        return "the spec trains the experts in FP8 (TransformerEngine keeps cuBLAS for FP8 operands)"
    if gpu.cc != (9, 0):
        return f"{gpu.name} is compute capability {gpu.cc_text}, and TransformerEngine uses it on 9.0 only"
    return ""


def trained_precision(spec: Spec, classes: tuple[str, ...]) -> dict[str, str]:
    """Class -> "fp8" / "bf16" in the trainer."""
    bf16 = set(spec.training.bf16_modules) if fp8_trained(spec) else set(classes)
    return {c: "bf16" if c in bf16 else "fp8" for c in classes}


def rollout_precision(ctx: ResolvedSpec) -> dict[str, str]:
    """Class -> "fp8", "bf16" or "mixed" (some of its linears excluded) in the rollout engine, over the layers
    outside the shared first/last BF16 layers."""
    plan = ctx.exclusions
    return dict(_rollout_classes(ctx.known_model, plan.quantized_names, plan.bf16_layers))


@lru_cache(maxsize=32)
def _rollout_classes(
    model: ModelFacts, quantized: frozenset[str], bf16_layers: frozenset[int]
) -> tuple[tuple[str, str], ...]:
    counts: dict[str, list[int]] = {}
    for m in model.linear_modules():
        cls = KIND_CLASS.get(m.kind)
        if cls is None or m.layer is None or m.layer in bf16_layers:
            continue
        q, n = counts.setdefault(cls, [0, 0])
        counts[cls] = [q + (m.name in quantized), n + 1]
    return tuple(
        (c, "fp8" if q == n else "bf16" if q == 0 else "mixed")
        for c, (q, n) in ((c, counts[c]) for c in TRAINING_MODULE_CLASSES if c in counts)
    )


@dataclass(frozen=True)
class ClassMismatch:
    cls: str
    trained: str
    rolled: str


def class_mismatches(ctx: ResolvedSpec) -> list[ClassMismatch]:
    """The module classes an end-to-end FP8 spec trains in another precision than its rollout runs them ([] when
    the trainer is BF16: that recipe differs everywhere by choice, and says so itself)."""
    spec = ctx.spec
    if not fp8_trained(spec) or ctx.model is None:
        return []
    rolled = rollout_precision(ctx)
    trained = trained_precision(spec, tuple(rolled))
    return [ClassMismatch(c, trained[c], rolled[c]) for c in rolled if trained[c] != rolled[c]]


def _kl(pair: list[float]) -> str:
    return f"{pair[0]:.1e} -> {pair[1]:.1e}"


def mismatch_consequence() -> str:
    """What training and rolling out a class in different precisions was measured to cost, quoted by id."""
    m = trainer_layouts()["mismatch"]
    return (
        f"rollout/trainer mismatch (k3 KL, step 1 -> 5) {_kl(m['same'])} with end-to-end FP8, "
        f"{_kl(m['experts_bf16_trained_fp8_rolled'])} with the experts trained BF16 and rolled out FP8, "
        f"{_kl(m['bf16_trained_fp8_rolled'])} with BF16 training and an FP8 rollout on the tiny Qwen3-MoE, Megatron + "
        "vLLM (measured:mismatch.megatron_vllm.e2e_fp8_k3, measured:mismatch.megatron_vllm.fp8_experts_bf16_k3, "
        "measured:mismatch.megatron_vllm.bf16_train_fp8_rollout_k3)"
    )


def mismatch_text(mismatches: list[ClassMismatch]) -> str:
    """One sentence naming each class trained and rolled out in different precisions ('' for none)."""
    if not mismatches:
        return ""
    named = ", ".join(
        f"{m.cls} trained {m.trained.upper()}, rolled out {m.rolled.upper()}" for m in mismatches
    )
    return f"training layout differs from the rollout: {named}; {mismatch_consequence()}"


@dataclass(frozen=True)
class LayoutSpeed:
    """One measured layout: BF16 training (recipe None) or FP8 with a recipe and classes kept in BF16."""

    recipe: Optional[str]
    bf16_modules: tuple[str, ...]
    ratio: float

    @property
    def label(self) -> str:
        if self.recipe is None:
            return "bf16"
        return f"fp8 {self.recipe}" + (f" + {'+'.join(self.bf16_modules)} BF16" if self.bf16_modules else "")


def layout_speeds(model: ModelFacts, gpu_arch: str) -> list[LayoutSpeed]:
    """BF16 and every measured FP8 layout of the model's class on this GPU generation ([] when not measured)."""
    if trainer_gain_unmeasured(model, gpu_arch, "blockwise"):
        return []
    kind = "moe" if model.is_moe else "dense"
    measured = [
        LayoutSpeed(str(e["recipe"]), tuple(e["bf16_modules"]), float(e["ratio"]))
        for e in trainer_layouts()["entries"]
        if e["model"] == kind
    ]
    return [LayoutSpeed(None, (), 1.0)] + measured


def layout_metric(model: ModelFacts) -> str:
    return str(trainer_layouts()["metric"]["moe" if model.is_moe else "dense"])


def spec_layout(spec: Spec, speeds: list[LayoutSpeed]) -> Optional[LayoutSpeed]:
    """The measured layout the spec trains with, or None when it was not measured."""
    if not fp8_trained(spec):
        return next((s for s in speeds if s.recipe is None), None)
    own = set(spec.training.bf16_modules)
    return next(
        (s for s in speeds if s.recipe == spec.training.fp8_scaling and set(s.bf16_modules) == own), None
    )


def recommended(ctx: ResolvedSpec, speeds: list[LayoutSpeed]) -> Optional[LayoutSpeed]:
    """The fastest measured layout that keeps training.priority: speed takes any; mismatch takes those that train
    no class in another precision than the rollout runs it, with the spec's own FP8 recipe."""
    spec = ctx.spec
    if not speeds or ctx.model is None:
        return None
    if spec.training.priority == "speed":
        return max(speeds, key=lambda s: s.ratio)
    rolled = rollout_precision(ctx)
    bf16_rolled = {c for c, p in rolled.items() if p == "bf16"}
    keeps = [
        s
        for s in speeds
        if (s.recipe is None and bf16_rolled == set(rolled))
        or (s.recipe == spec.training.fp8_scaling and set(s.bf16_modules) <= bf16_rolled)
    ]
    return max(keeps, key=lambda s: s.ratio) if keeps else None


def layouts_text(ctx: ResolvedSpec, speeds: list[LayoutSpeed]) -> str:
    """'bf16 1.00x, fp8 blockwise 0.82x, ...; for priority mismatch: ...' ('' when not measured)."""
    if not speeds:
        return ""
    model = ctx.known_model
    own = spec_layout(ctx.spec, speeds)
    shown = ", ".join(f"{s.label} {s.ratio:.2f}x" + (" (this spec's)" if s == own else "") for s in speeds)
    best = recommended(ctx, speeds)
    if best is None:
        advice = f"no measured layout keeps training.priority {ctx.spec.training.priority}"
    else:
        mark = " (this spec's)" if best == own else ""
        advice = f"fastest that keeps training.priority {ctx.spec.training.priority}: {best.label}{mark}"
    return f"trainer speed per layout vs BF16 ({layout_metric(model)}, docs/results.md#trainer-layer-cost): {shown}; {advice}"
