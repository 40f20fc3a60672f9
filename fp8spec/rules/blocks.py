"""Block geometry: every quantized weight shard must sit on whole FP8 blocks."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from fp8spec.linear_classes import EngineModule, Member, engine_modules
from fp8spec.patchset import patch_supports
from fp8spec.rules.examples import MOE, Examples, fragment
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.engines.base import Engine
    from fp8spec.resolve.context import ResolvedSpec


def _per_rank_out(module: Member, model: ModelFacts, tp: int) -> tuple[int, bool]:
    """Output rows of one rank, and whether the split is exact. K/V heads are replicated when tp > kv_heads."""
    if module.kind == "attn_qkv" and module.suffix in ("k_proj", "v_proj"):
        kv = model.num_key_value_heads
        heads = max(1, kv // tp) if tp > kv else kv // tp
        return heads * model.head_dim, (kv % tp == 0 or tp % kv == 0)
    return module.out_features // tp, module.out_features % tp == 0


def misaligned_shards(
    classes: Iterable[tuple[EngineModule, int]],
    model: ModelFacts,
    block: Sequence[int],
    tp: int,
    ep: int,
    engine: Engine,
) -> OrderedDict[tuple, list]:
    """Group the quantized modules whose per-rank shard is not on the block grid.

    ``classes``: the model's engine modules with their counts (fp8spec.linear_classes), so that the cost does
    not grow with the number of experts. Mirrors vLLM's validate_fp8_block_shape /
    validate_fp8_block_shape_moe (vllm/model_executor/layers/quantization/utils/fp8_utils.py) and SGLang's
    stricter Fp8LinearMethod.validate_block_quant_shapes, which checks every merged partition.
    Returns OrderedDict key -> (count, text).
    """
    block_n, block_k = block
    bad: "OrderedDict[tuple, list]" = OrderedDict()

    def add(key: tuple, count: int, text: str) -> None:
        bad.setdefault(key, [0, text])[0] += count

    merged: list[tuple[list[tuple[Member, int]], int]] = []
    for cls, count in classes:
        merged_members: list[tuple[Member, int]] = []
        for m in cls.members:
            if not m.quantized:
                continue
            experts = m.kind in ("expert_in", "expert_out")
            split = 1 if (experts and ep > 1) else tp
            if m.parallel == "replicated":
                continue
            if m.parallel == "row":
                if split > 1:
                    per, exact = m.in_features // split, m.in_features % split == 0
                    if not exact or per % block_k:
                        add(
                            (m.shape, "in", m.in_features, split),
                            count,
                            f"in_features {m.in_features} / tp {split} = "
                            f"{m.in_features / split:g}, not a multiple of block {block_k}",
                        )
                continue
            per, exact = _per_rank_out(m, model, split)
            if m.group and split == 1 and engine.ragged_last_partition and not experts:
                merged_members.append((m, per))
                continue
            if split > 1 or m.group or engine.checks_unsplit_shards:
                if not exact or per % block_n:
                    add(
                        (m.shape, "out", m.out_features, split),
                        count,
                        f"out_features {m.out_features} / tp {split} = "
                        f"{m.out_features / split:g}, not a multiple of block {block_n}",
                    )
        if merged_members:
            merged.append((merged_members, count))
    # vLLM lets the last partition of a merged layer be ragged when the layer is not TP-split.
    for members, count in merged:
        for m, per in members[:-1]:
            if per % block_n:
                add(
                    (m.shape, "out", m.out_features, 1),
                    count,
                    f"out_features {m.out_features} is not a multiple of block {block_n} inside a fused layer",
                )
    return bad


def candidate_tps(world: int) -> list[int]:
    """Rollout tp values worth trying: powers of two that divide the GPUs (other rules decide which work)."""
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max(world, 1) and world % t == 0] or [1]


@rule(
    "BLK001",
    "shard-not-block-aligned",
    "error",
    "A quantized weight's per-rank shard is not a whole number of FP8 blocks.",
    """Block FP8 stores one scale per block_n x block_k tile of each rank's shard. vLLM rejects a shard that
    is not on the grid ("The output_size of gate's and up's weight = 192 is not divisible by weight
    quantization block_n = 128", validate_fp8_block_shape in vllm/.../quantization/utils/fp8_utils.py;
    vLLM issue #25292) and SGLang checks every merged partition (Fp8LinearMethod.validate_block_quant_shapes).
    Example: Qwen3-30B-A3B's experts have 768 rows, so rollout tp 4 gives 192-row shards.""",
    "set rollout.tp to a value the hint lists (each passes every rule), or exclude the module in linear.exclude",
    scope="engine",
    examples=Examples(
        bad=fragment(MOE, {"rollout": {"tp": 4}}),
        good=fragment(MOE, {"rollout": {"tp": 2}}),
        message="768 / tp 4 = 192",
    ),
)
def shard_not_block_aligned(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, model = ctx.spec, ctx.known_model
    if not spec.linear.quantize:
        return
    quantized = engine_modules(model, ctx.exclusions.quantized_names)
    block = tuple(spec.linear.block_size)
    bad = misaligned_shards(quantized, model, block, spec.rollout.tp, spec.rollout.ep, ctx.engine)
    if not bad:
        return
    aligned = [
        t
        for t in candidate_tps(spec.world_size)
        if not misaligned_shards(quantized, model, block, t, spec.rollout.ep, ctx.engine)
    ]
    hint, ok = proposal(
        ctx,
        "BLK001",
        "rollout.tp",
        ({"rollout.tp": t} for t in aligned),
        "or keep the misaligned modules in BF16 (linear.exclude)"
        if aligned
        else "no rollout.tp puts every shard on whole blocks: keep the misaligned modules in BF16 "
        "(linear.exclude)",
    )
    for (pattern, _dim, _size, _split), (count, text) in bad.items():
        plural = f" ({count} modules)" if count > 1 else ""
        yield Finding(f"{pattern}{plural}: {text}", "rollout.tp", hint, ok)


@rule(
    "BLK002",
    "block-size-unsupported",
    "error",
    "A block size the rollout path cannot serve.",
    """verl 0.9.1 hard-codes weight_block_size [128, 128] in the FP8 quantization config it hands to vLLM
    and SGLang (vllm_async_server.py FP8_BLOCK_QUANT_KWARGS; sglang_fp8_utils.build_sglang_fp8_quant_config),
    and DeepGEMM / TransformerEngine blockwise kernels use 128-wide blocks (Float8BlockQuantizer.block_len = 128).
    Another block size would be silently replaced, so trainer-side and engine-side scales would disagree.""",
    "use linear.block_size: [128, 128]",
    needs_model=False,
    scope="engine",
    examples=Examples(
        bad={"linear": {"block_size": [64, 64]}},
        good={"linear": {"block_size": [128, 128]}},
        message="[64, 64]",
    ),
)
def block_size_unsupported(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    supported = ctx.fact("verl", "capability.vllm_fp8_weight_block_size", [128, 128])
    if spec.linear.quantize and list(spec.linear.block_size) != list(supported):
        yield Finding(
            f"linear.block_size {list(spec.linear.block_size)} is not supported; verl {spec.stack.verl} "
            f"quantizes with {list(supported)}",
            "linear.block_size",
        )


@rule(
    "BLK003",
    "sync-quantizer-unsupported",
    "error",
    "The fp8spec weight-sync quantizer does not know this engine or verl version.",
    """linear.sync_quantizer: fp8spec activates the runtime patch fast_block_quant, which replaces verl's
    quant_weights (vLLM path, in the engine's workers) or FP8QuantizerHelper.quant_weights_by_name (SGLang path,
    in the trainer). It is written against exact verl and engine versions (fp8spec/runtime/manifest.py) and
    refuses unknown ones at start; on vLLM 0.24.0 under verl 0.9.1 it was run through verl's own receiver into
    the real engine (docs/results.md#weight-sync).""",
    "use linear.sync_quantizer: auto (fp8spec where proven, verl elsewhere) or verl",
    needs_model=False,
    # every profiled version is supported: a version without a profile (REF002 fires too) shows the rule
    examples=Examples(
        bad={"stack": {"vllm": "0.99.0"}, "linear": {"sync_quantizer": "fp8spec"}},
        good={"linear": {"sync_quantizer": "fp8spec"}},
        message="not 0.99.0",
    ),
)
def sync_quantizer_unsupported(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.linear.quantize or spec.linear.sync_quantizer != "fp8spec":
        return
    supported, versions = patch_supports("fast_block_quant", ctx.engine.name, ctx.engine_version)
    if not supported:
        yield Finding(
            f"linear.sync_quantizer fp8spec: the fast_block_quant patch supports {ctx.engine.name} "
            f"{', '.join(versions) or 'no version'}, not {ctx.engine_version}",
            "linear.sync_quantizer",
        )


@rule(
    "BLK005",
    "sync-quantizer-unverified",
    "warning",
    "The fp8spec weight-sync quantizer was not shown byte-exact in this engine.",
    """An explicit linear.sync_quantizer: fp8spec is proven where the engine's profile records fast_block_quant
    as run in the real engine and byte-exact against a fresh engine loaded from the reference quantization
    (verified.fast_block_quant_in_engine: vLLM 0.24.0, docs/results.md#weight-sync; SGLang 0.5.12, docs/results.md#weight-sync);
    auto also waits for a run inside an RL loop (verified.fast_block_quant_in_loop: vLLM 0.24.0 only so far).
    Elsewhere (vLLM 0.33.0, SGLang 0.5.23: profiled from source, never run) an explicit fp8spec still wins, but
    unproven: the patch replaces a verl function whose callers and the engine's loaders may have moved.""",
    "use linear.sync_quantizer: auto (verl's quantizer here), or keep fp8spec knowingly and acknowledge BLK005",
    needs_model=False,
    examples=Examples(
        bad={
            "rollout": {"engine": "sglang"},
            "stack": {"sglang": "0.5.23"},
            "kv_cache": {"dtype": "bf16"},
            "linear": {"sync_quantizer": "fp8spec"},
        },
        good={
            "rollout": {"engine": "sglang"},
            "kv_cache": {"dtype": "bf16"},
            "linear": {"sync_quantizer": "fp8spec"},
        },
        message="not shown byte-exact",
    ),
)
def sync_quantizer_unverified(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.linear.quantize or spec.linear.sync_quantizer != "fp8spec":
        return
    if ctx.fact(ctx.engine.name, "verified.fast_block_quant_in_engine", False) is not True:
        yield Finding(
            f"linear.sync_quantizer fp8spec on {ctx.engine.name} {ctx.engine_version}: fast_block_quant was not shown "
            "byte-exact against a fresh engine there",
            "linear.sync_quantizer",
        )


@rule(
    "BLK006",
    "direct-sync-unverified",
    "error",
    "The direct weight-sync path was not shown byte-exact in this engine.",
    """linear.sync_quantizer: direct activates the runtime patch direct_sync, which quantizes each received bucket
    straight into the engine's fused and stacked FP8 parameters through a plan built from vLLM's own loaders
    (fp8spec/runtime/weight_sync/receiver/direct_sync_plan.py), bypassing vLLM's per-tensor load_weights. It is byte-equal to
    quantize-then-copy on CPU against vLLM 0.24.0's mapping tables, but writing into a live engine's parameters
    behind its loaders is only safe once a device run shows the synced engine byte-identical to a fresh one
    (greedy outputs equal where the engine is reproducible); the engine's profile records that as
    verified.direct_sync_in_engine, and the largest rollout tp it was shown at as verified.direct_sync_max_tp
    (vLLM 0.24.0: TP1, docs/results.md#weight-sync). The plan reads vLLM's loaders only: SGLang has no direct path. It
    writes FP32 block scales only (linear.scale_dtype fp32): with ue8m0 the engine would get scales that are not
    powers of two.""",
    "use linear.sync_quantizer: auto or fp8spec; for a measurement run, acknowledge BLK006 with the reason",
    acknowledgeable=True,
    needs_model=False,
    examples=Examples(
        bad={"linear": {"sync_quantizer": "direct"}, "rollout": {"tp": 2}},
        good={"linear": {"sync_quantizer": "direct"}, "rollout": {"tp": 1}},
        message="up to tp 1 only",
    ),
)
def direct_sync_unverified(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.linear.quantize or spec.linear.sync_quantizer != "direct":
        return
    if not ctx.engine.direct_sync_plan:
        yield Finding(
            f"linear.sync_quantizer direct: the direct_sync patch plans vLLM's loaders only, not {ctx.engine.label}",
            "linear.sync_quantizer",
        )
    elif spec.linear.scale_dtype != "fp32":
        yield Finding(
            f"linear.sync_quantizer direct with linear.scale_dtype {spec.linear.scale_dtype}: the direct_sync patch "
            "writes fp32 block scales only",
            "linear.scale_dtype",
        )
    elif ctx.fact(ctx.engine.name, "verified.direct_sync_in_engine", False) is not True:
        yield Finding(
            f"linear.sync_quantizer direct on {ctx.engine.name} {ctx.engine_version}: direct_sync was not shown "
            "byte-exact against a fresh engine there (verified.direct_sync_in_engine)",
            "linear.sync_quantizer",
        )
    elif spec.rollout.tp > (max_tp := int(ctx.fact(ctx.engine.name, "verified.direct_sync_max_tp", 1))):
        yield Finding(
            f"linear.sync_quantizer direct with rollout.tp {spec.rollout.tp}: direct_sync was shown byte-exact "
            f"on {ctx.engine.name} {ctx.engine_version} up to tp {max_tp} only (verified.direct_sync_max_tp)",
            "linear.sync_quantizer",
        )


@rule(
    "BLK004",
    "deep-gemm-is-vllm-only",
    "warning",
    "linear.deep_gemm applies to the vLLM engine only.",
    """linear.deep_gemm compiles to vLLM's VLLM_USE_DEEP_GEMM environment variable (vllm/envs.py:1434 in
    0.24.0). SGLang chooses its block-FP8 GEMM through its own server arguments and environment, which
    fp8spec does not set from this field.""",
    "remove linear.deep_gemm, or roll out with vLLM: rollout.engine: vllm",
    needs_model=False,
    scope="engine",
    examples=Examples(
        bad={"rollout": {"engine": "sglang"}, "linear": {"deep_gemm": False}},
        good={"linear": {"deep_gemm": False}},
        message="no effect on sglang",
    ),
)
def deep_gemm_is_vllm_only(ctx: ResolvedSpec) -> Iterator[Finding]:
    lin = ctx.spec.linear
    if lin.deep_gemm is not None and not ctx.engine.deep_gemm_switch:
        yield Finding(f"linear.deep_gemm has no effect on {ctx.engine.name}", "linear.deep_gemm")
