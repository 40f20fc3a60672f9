"""Hardware: FP8 formats and scale dtypes must suit the TARGET GPU (never the machine running fp8spec)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.hardware import version_tuple
from fp8spec.rules.examples import MEGATRON_FP8, Examples, fragment
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

_SCALINGS = ("blockwise", "tensorwise", "delayed", "mxfp8")


def _training_fix(ctx, code: str, path: str):
    """Other FP8 scalings that pass every rule on this GPU, or BF16 training (FP8 stays in the rollout)."""
    candidates = [{"training.fp8_scaling": s} for s in _SCALINGS if s != ctx.spec.training.fp8_scaling]
    return proposal(
        ctx,
        code,
        path,
        candidates + [{"training.precision": "bf16"}],
        "train in BF16 (training.precision: bf16) or target a GPU that supports the recipe",
    )


def _fp8_training(spec) -> bool:
    return spec.training.precision == "fp8"


@rule(
    "HW001",
    "mxfp8-needs-blackwell",
    "error",
    "MXFP8 training needs a Blackwell GPU (compute capability 10.x).",
    """TransformerEngine enables MXFP8 only for 10.0 <= compute capability < 12.0
    (_compute_mxfp8_support in transformer_engine/pytorch/quantization.py); Hopper has no MXFP8 tensor cores.""",
    "use the training.fp8_scaling the hint names for this GPU (blockwise on Hopper), or training.precision: bf16",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"fp8_scaling": "mxfp8"}}),
        good=fragment(
            MEGATRON_FP8,
            {
                "training": {"fp8_scaling": "mxfp8"},
                "hardware": {"gpu": "b200"},
                "linear": {"scale_dtype": "ue8m0"},
            },
        ),
        message="compute capability 10.x",
    ),
)
def mxfp8_needs_blackwell(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, gpu = ctx.spec, ctx.gpu
    if _fp8_training(spec) and spec.training.fp8_scaling == "mxfp8" and not (10, 0) <= gpu.cc < (12, 0):
        hint, ok = _training_fix(ctx, "HW001", "training.fp8_scaling")
        yield Finding(
            f"training.fp8_scaling mxfp8 needs compute capability 10.x; {gpu.name} is {gpu.cc_text}",
            "training.fp8_scaling",
            hint,
            ok,
        )


@rule(
    "HW002",
    "blockwise-needs-sm90-cuda129",
    "error",
    "Blockwise FP8 needs compute capability >= 9.0 and a CUDA >= 12.9 torch build.",
    """TransformerEngine's Float8BlockScaling checks "FP8 block scaled GEMM requires compute capability 9.0
    or higher and CUDA >= 12.9" against torch.version.cuda (_compute_fp8_block_scaling_support); cuBLAS
    128x128 block scaling needs CUDA 12.9 (NeMo-RL #971). FP8 rollout also needs FP8 tensor cores
    (compute capability >= 8.9).""",
    "use a Hopper or Blackwell GPU and a torch built with CUDA 12.9 or newer; the hint names what passes every "
    "rule on this GPU",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"hardware": {"cuda": "12.4"}}),
        good=fragment(MEGATRON_FP8, {"hardware": {"cuda": "12.9"}}),
        message="CUDA >= 12.9",
    ),
)
def blockwise_needs_sm90(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, gpu = ctx.spec, ctx.gpu
    cuda = version_tuple(spec.hardware.cuda)
    if _fp8_training(spec) and spec.training.fp8_scaling == "blockwise":
        if gpu.cc < (9, 0):
            hint, ok = _training_fix(ctx, "HW002", "hardware.gpu")
            yield Finding(
                f"blockwise FP8 training needs compute capability >= 9.0; {gpu.name} is {gpu.cc_text}",
                "hardware.gpu",
                hint,
                ok,
            )
        if cuda < (12, 9):
            hint, ok = proposal(ctx, "HW002", "hardware.cuda", [{"hardware.cuda": "12.9"}], "")
            if ok:  # keep the label proposal() chose: it passes every rule only where nothing else is left
                label = hint[hint.rindex("(") :] if hint.endswith(")") else "(clears HW002, adds no error)"
                hint = f'run a torch built with CUDA 12.9 or newer and set hardware.cuda: "12.9" {label}'
            else:
                hint, ok = _training_fix(ctx, "HW002", "hardware.cuda")
            yield Finding(
                f"blockwise FP8 training needs CUDA >= 12.9; hardware.cuda is {spec.hardware.cuda}",
                "hardware.cuda",
                hint,
                ok,
            )
    if spec.linear.quantize and gpu.cc < (8, 9):
        hint, ok = proposal(
            ctx,
            "HW002",
            "linear.quantize",
            [{"linear.quantize": False}],
            "target a GPU with FP8 tensor cores (compute capability >= 8.9)",
        )
        if ok:
            hint = (
                f"{gpu.name} has no FP8 tensor cores: {hint} for BF16 rollouts, or target a GPU with compute "
                "capability >= 8.9"
            )
        yield Finding(
            f"FP8 rollout needs FP8 tensor cores (compute capability >= 8.9); {gpu.name} is {gpu.cc_text}",
            "linear.quantize",
            hint,
            ok,
        )


@rule(
    "HW003",
    "blackwell-training-fp32-scales",
    "error",
    "FP8 blockwise training on Blackwell cannot use FP32 block scales.",
    """From TE 2.9, Blackwell runs the blockwise recipe emulated on MXFP8, and its quantize kernels check
    "On Blackwell and newer, the FP8 block scaling recipe is emulated with MXFP8, which requires using power
    of two scaling factors" (quantize_transpose_*_blockwise.cu); verl's GB200 recipe sets
    NVTE_FP8_BLOCK_SCALING_FP32_SCALES=0.""",
    "set linear.scale_dtype: ue8m0 on Blackwell",
    needs_model=False,
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"hardware": {"gpu": "b200"}}),
        good=fragment(MEGATRON_FP8, {"hardware": {"gpu": "b200"}, "linear": {"scale_dtype": "ue8m0"}}),
        message="power-of-two",
    ),
)
def blackwell_training_fp32(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, gpu = ctx.spec, ctx.gpu
    if (
        _fp8_training(spec)
        and spec.training.fp8_scaling == "blockwise"
        and gpu.is_blackwell
        and spec.linear.scale_dtype == "fp32"
    ):
        hint, ok = proposal(ctx, "HW003", "linear.scale_dtype", [{"linear.scale_dtype": "ue8m0"}], "")
        yield Finding(
            f"FP8 blockwise training on {gpu.name} needs power-of-two scales, but linear.scale_dtype is fp32",
            "linear.scale_dtype",
            hint,
            ok,
        )


@rule(
    "HW006",
    "fp8-training-needs-fp8-tensor-cores",
    "error",
    "FP8 training needs FP8 tensor cores (compute capability 8.9 or newer).",
    """TransformerEngine runs FP8 GEMMs only from compute capability 8.9 (Ada; Hopper and newer without
    further conditions): _compute_fp8_support returns "Device compute capability 8.9 or higher required for
    FP8 execution." below it, for every recipe (transformer_engine/pytorch/quantization.py:149-159, the
    transformer-engine profile's requirement.fp8). An A100 (8.0) cannot train in FP8 with any scaling.""",
    "set training.precision: bf16, or target a GPU with compute capability >= 8.9",
    needs_model=False,
    examples=Examples(
        bad=fragment(
            MEGATRON_FP8,
            {
                "hardware": {"gpu": "a100"},
                "linear": {"quantize": False},
                "training": {"fp8_scaling": "tensorwise"},
            },
        ),
        good=fragment(MEGATRON_FP8, {"hardware": {"gpu": "l40s"}, "training": {"fp8_scaling": "tensorwise"}}),
        message="compute capability >= 8.9; a100 is 8.0",
    ),
)
def fp8_training_needs_fp8_cores(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, gpu = ctx.spec, ctx.gpu
    need = ctx.fact("transformer-engine", "requirement.fp8")
    if not _fp8_training(spec) or need is None or not ctx.trainer.fp8_training:
        return
    if gpu.cc < version_tuple(str(need["min_cc"])):
        hint, ok = proposal(
            ctx,
            "HW006",
            "training.precision",
            [{"training.precision": "bf16"}],
            f"target a GPU with compute capability >= {need['min_cc']}",
        )
        yield Finding(
            f"FP8 training needs compute capability >= {need['min_cc']}; {gpu.name} is {gpu.cc_text}",
            "training.precision",
            hint,
            ok,
        )
