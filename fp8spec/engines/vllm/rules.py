"""vLLM's own rules: what its attention backends and DeepGEMM path accept (run only for specs on vLLM)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import MOE, Examples, fragment
from fp8spec.rules.kv_cache import static_kv_fix
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule, rule_hint

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "KV001",
    "kv-e5m2-unsupported",
    "error",
    "fp8_e5m2 KV cache is rejected by the engine's default Hopper attention backend.",
    """vLLM's FLASH_ATTN backend (the Hopper default for non-MLA models) supports auto, bfloat16, fp8 and
    fp8_e4m3 KV caches, not fp8_e5m2 (vllm/v1/attention/backends/flash_attn.py supported_kv_cache_dtypes);
    with FA3 it also quantizes the query with the q scale, which needs E4M3.""",
    "use kv_cache.dtype: fp8_e4m3",
    needs_model=False,
    engine="vllm",
    scope="engine",
    examples=Examples(
        bad={"kv_cache": {"dtype": "fp8_e5m2"}}, good={"kv_cache": {"dtype": "fp8_e4m3"}}, message="fp8_e5m2"
    ),
)
def kv_e5m2(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.kv_cache.dtype != "fp8_e5m2" or ctx.gpu.arch != "hopper":
        return
    supported = ctx.fact("vllm", "attention.flash_attn_kv_dtypes")
    if supported is not None and "fp8_e5m2" in supported:
        return
    yield Finding(
        f"kv_cache.dtype fp8_e5m2 is not supported by vLLM {ctx.engine_version}'s FLASH_ATTN "
        "backend on Hopper",
        "kv_cache.dtype",
    )


@rule(
    "KV006",
    "kv-scales-flashinfer-vllm",
    "error",
    "vLLM's FlashInfer attention ignores q/k/v scales pushed after its first forward.",
    """On Blackwell (compute capability 10.x) vLLM picks FLASHINFER for non-MLA attention
    (vllm/platforms/cuda.py _get_backend_priorities; profile fact capability.fp8_kv_attention_backend).
    FlashInferImpl derives bmm1_scale/bmm2_scale from the host floats _q/_k/_v_scale_float at its first
    forward and never recomputes them (vLLM 0.24.0 flashinfer.py 1404-1406 and 1474-1482, 0.33.0 2223-2230),
    and FULL decode CUDA graphs bake those floats in: every scale pushed later is ignored while the log says it
    was applied. FA3 (Hopper) reads device tensors instead; that path was run on an H200 (docs/results.md#kv-scales).""",
    "on Blackwell use kv_cache.recalibrate: none (static scales, see KV004) or kv_cache.dtype: bf16; per-step "
    "scales are proven on Hopper (FLASH_ATTN)",
    needs_model=False,
    engine="vllm",
    examples=Examples(
        bad={"hardware": {"gpu": "b200"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
        good=(
            {"hardware": {"gpu": "h100"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
            {"hardware": {"gpu": "b200"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}},
        ),
        message="FLASHINFER",
    ),
)
def kv_scales_flashinfer_vllm(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.kv_cache.recalibrating:
        return
    backend = (ctx.fact("vllm", "capability.fp8_kv_attention_backend") or {}).get(ctx.gpu.arch)
    honoured = (ctx.fact("vllm", "capability.per_step_kv_scales") or {}).get(backend, True)
    if backend is not None and not honoured:
        hint, ok = static_kv_fix(ctx, "KV006")
        yield Finding(
            f"kv_cache.recalibrate {spec.kv_cache.recalibrate} on {spec.hardware.gpu}: vLLM "
            f"{ctx.engine_version} runs {backend} there, which keeps the q/k/v scales of its first "
            "forward (pushed scales would be silently ignored)",
            "kv_cache.recalibrate",
            hint,
            ok,
        )


@rule(
    "HW005",
    "vllm-blackwell-fp32-scales",
    "warning",
    "vLLM's DeepGEMM on Blackwell needs UE8M0 scales.",
    """On Blackwell vLLM's DeepGEMM block-FP8 path requires UE8M0 scales: with E8M0 disabled it hard-fails
    or produces NaN (vLLM #37806, #57486). FP32 scales on Blackwell force the CUTLASS path, or fail.""",
    "set linear.scale_dtype: ue8m0 on Blackwell",
    needs_model=False,
    engine="vllm",
    scope="engine",
    examples=Examples(
        bad={"hardware": {"gpu": "b200"}},
        good={"hardware": {"gpu": "b200"}, "linear": {"scale_dtype": "ue8m0"}},
        message="DeepGEMM",
    ),
)
def vllm_blackwell_fp32(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, gpu = ctx.spec, ctx.gpu
    if spec.linear.quantize and gpu.is_blackwell and spec.linear.scale_dtype == "fp32":
        hint, ok = proposal(ctx, "HW005", "linear.scale_dtype", [{"linear.scale_dtype": "ue8m0"}], "")
        yield Finding(
            f"vLLM on {gpu.name} with fp32 block scales cannot use DeepGEMM", "linear.scale_dtype", hint, ok
        )


@rule(
    "PAR014",
    "batched-tokens-below-seqs",
    "error",
    "vLLM's max_num_batched_tokens is below its max_num_seqs.",
    """vLLM's scheduler refuses to start when one step's token budget cannot give each running sequence a
    token: 'max_num_batched_tokens (...) must be greater than or equal to max_num_seqs (...)' (ValueError,
    vllm/config/scheduler.py:286-291 in 0.24.0). verl passes both (vllm_async_server.py:333-335); unset
    fields are verl's defaults, 8192 and 256 (verl/trainer/config/rollout/rollout.yaml:78,84).""",
    "raise rollout.max_num_batched_tokens to at least rollout.max_num_seqs, or lower max_num_seqs",
    needs_model=False,
    engine="vllm",
    scope="engine",
    examples=Examples(
        bad={"rollout": {"max_num_batched_tokens": 128}},
        good={"rollout": {"max_num_batched_tokens": 256}},
        message="rollout.max_num_batched_tokens 128 is below rollout.max_num_seqs 256",
    ),
)
def batched_tokens_below_seqs(ctx: ResolvedSpec) -> Iterator[Finding]:
    r = ctx.spec.rollout
    if r.max_num_batched_tokens is None and r.max_num_seqs is None:
        return  # verl's defaults (8192 >= 256)
    d = ctx.fact("verl", "memory.rollout_engine_defaults") or {}
    tokens = r.max_num_batched_tokens or d.get("max_num_batched_tokens")
    seqs = r.max_num_seqs or d.get("max_num_seqs")
    if tokens is None or seqs is None or int(tokens) >= int(seqs):
        return
    path = (
        "rollout.max_num_batched_tokens" if r.max_num_batched_tokens is not None else "rollout.max_num_seqs"
    )
    candidates = [{"rollout.max_num_batched_tokens": int(seqs)}]
    if int(tokens) <= 4096:
        candidates.append({"rollout.max_num_seqs": int(tokens)})
    hint, ok = proposal(
        ctx, "PAR014", path, candidates, "raise max_num_batched_tokens to max_num_seqs or more"
    )
    yield Finding(
        f"rollout.max_num_batched_tokens {tokens} is below rollout.max_num_seqs {seqs}: vLLM refuses to start",
        path,
        hint,
        ok,
    )


def _fp8_moe_backend(ctx: ResolvedSpec) -> str | None:
    """The FP8 MoE kernel vLLM picks for the spec's block-FP8 experts, where the profile says (Hopper only:
    elsewhere the choice depends on installed kernels the spec does not pin)."""
    auto = ctx.fact("vllm", "capability.fp8_moe_backend_auto") or {}
    if ctx.gpu.arch != "hopper" or ctx.spec.linear.deep_gemm:  # VLLM_USE_DEEP_GEMM=1 forces DEEPGEMM first
        return None
    return auto.get("hopper_block_fp8_ep" if ctx.spec.rollout.ep > 1 else "hopper_block_fp8_tp")


@rule(
    "BLK007",
    "fp8-moe-relayout-breaks-refit",
    "error",
    "vLLM's FP8 MoE kernel re-lays the experts after loading in a way the weight sync does not redo.",
    """Some vLLM FP8 MoE kernels rewrite the expert weights once, in process_weights_after_loading. For block
    FP8 on Hopper with expert parallelism vLLM 0.24.0 picks FLASHINFER_CUTLASS (fused_moe/oracle/fp8.py:105-115;
    flashinfer-python is one of its requirements), which swaps the gate and up halves of every w13 weight and
    scale without changing a shape or dtype (quantization/utils/flashinfer_utils.py:444-535; profile fact
    capability.fp8_moe_relayout_keeps_shape). verl 0.9.1's FP8 weight sync re-runs that processing only for
    layers whose parameters changed shape or dtype (verl/utils/vllm/vllm_fp8_utils.py:198-292; profile fact
    capability.vllm_fp8_refit_reprocess), so after the first sync every expert computes with gate and up
    exchanged: garbage rollouts with no error. The same failure is reported for other re-laid kernels: NeMo-RL PR
    #3545 (FlashInfer TRT-LLM repacked MoE experts: a refit without vLLM's reload protocol keeps executing stale
    experts); vLLM RFC #48312 tracks weight-reload correctness for RL, FlashInfer CUTLASS MoE among its rows. Tensor-parallel
    experts run on TRITON, which keeps the checkpoint layout; through that sync a tiny Qwen3-MoE
    engine matched a fresh one byte for byte on an H200 (docs/results.md#weight-sync).""",
    "use rollout.ep: 1 (tensor-parallel experts on vLLM's TRITON kernel, which keeps the checkpoint layout), or "
    "keep the routed experts in BF16 (linear.exclude)",
    engine="vllm",
    examples=Examples(
        bad=fragment(MOE, {"rollout": {"tp": 2, "ep": 2}}),
        good=(
            fragment(MOE, {"rollout": {"tp": 2, "ep": 1}}),
            fragment(MOE, {"rollout": {"tp": 2, "ep": 2}, "linear": {"quantize": False}}),
        ),
        message="FLASHINFER_CUTLASS",
    ),
)
def fp8_moe_relayout_breaks_refit(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.linear.quantize or not any(m.kind.startswith("expert_") for m in ctx.exclusions.quantized):
        return
    backend = _fp8_moe_backend(ctx)
    same_shape = (ctx.fact("vllm", "capability.fp8_moe_relayout_keeps_shape") or {}).get("block_fp8", [])
    reprocess = ctx.fact("verl", "capability.vllm_fp8_refit_reprocess") or {}
    verl = ctx.profile("verl")
    if backend is None or backend not in same_shape or reprocess.get("same_shape_relayout", True) or not verl:
        return
    hint, ok = proposal(ctx, "BLK007", "rollout.ep", [{"rollout.ep": 1}], rule_hint("BLK007"))
    yield Finding(
        f"rollout.ep {spec.rollout.ep} on {spec.hardware.gpu}: vLLM {ctx.engine_version} runs {ctx.known_model.id}'s "
        f"block-FP8 experts on {backend}, which re-lays them after loading without changing their shapes; "
        f"verl {verl.version}'s weight sync re-processes only layers whose shape or dtype changed, "
        "so every synced expert would compute with gate and up exchanged",
        "rollout.ep",
        hint,
        ok,
    )
