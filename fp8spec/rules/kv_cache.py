"""FP8 KV cache: dtype vs attention backend, and how q/k/v scales are (re)calibrated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.patchset import patch_attention, patch_supports
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
)
def kv_e5m2(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.kv_cache.dtype != "fp8_e5m2" or ctx.engine != "vllm" or ctx.gpu.arch != "hopper":
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
    "KV002",
    "kv-recalibration-unrealisable",
    "error",
    "The requested KV-scale recalibration cannot be realised on this engine version.",
    """The paper re-armed vLLM's calculate_kv_scales after every weight sync. vLLM removed that option
    (deprecated in #37201, removed in #49389; 0.33 has no such field), verl never merged the re-arming
    (verl PR #4435 is open), and SGLang never had it (sglang #6518). Per-step scales therefore come from the
    fp8spec runtime patch 'kv_scales', which must know the engine version.""",
    "use an engine version the runtime patch supports (listed in the message), or kv_cache.recalibrate: none",
    needs_model=False,
)
def kv_recalibration_unrealisable(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.kv_cache.dtype == "bf16" or spec.kv_cache.recalibrate == "none":
        return
    engine, version = ctx.engine, ctx.engine_version
    if ctx.native_kv_calibration():
        return
    supported, versions = patch_supports("kv_scales", engine, version)
    if not supported:
        known = ", ".join(versions) or "none"
        yield Finding(
            f"kv_cache.recalibrate {spec.kv_cache.recalibrate} is not realisable on {engine} {version}: no native "
            f"mechanism, and the fp8spec runtime patch 'kv_scales' supports {engine} {known}",
            "kv_cache.recalibrate",
        )


@rule(
    "KV003",
    "sglang-ignores-q-scale",
    "warning",
    "SGLang ignores the query scale of an FP8 KV cache.",
    """SGLang's FA3 backend casts the query to the KV dtype with no scale (prepare_paged_mha_query:
    q.to(kv_cache_dtype)) and passes only k/v descales; no MHA backend reads q_scale. Large query values
    lose precision or saturate, which calibrated q scales cannot fix.""",
    "accept it, or use vLLM (FA3 applies the q scale), or kv_cache.dtype: bf16",
    needs_model=False,
)
def sglang_q_scale(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.engine == "sglang" and ctx.spec.kv_cache.dtype != "bf16":
        yield Finding("SGLang applies k/v scales only; the query is cast to FP8 unscaled", "kv_cache.dtype")


@rule(
    "KV004",
    "kv-fp8-uncalibrated",
    "warning",
    "FP8 KV cache with no calibration runs with scales of 1.0.",
    """Without a checkpoint or pushed scales, vLLM (since #49389) and SGLang fall back to k/v scales of 1.0
    ("Defaulting to scaling factors of 1.0"); sgl-cookbook #237 removed fp8_e4m3 KV from recipes because
    uncalibrated scales degraded reasoning accuracy.""",
    "set kv_cache.recalibrate: per_step",
    needs_model=False,
)
def kv_uncalibrated(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.kv_cache.dtype != "bf16" and spec.kv_cache.recalibrate == "none":
        yield Finding(
            f"kv_cache.dtype {spec.kv_cache.dtype} with recalibrate none uses scales of 1.0",
            "kv_cache.recalibrate",
        )


@rule(
    "KV005",
    "kv-recalibration-mla",
    "error",
    "Per-step KV-scale recalibration is not implemented for MLA attention.",
    """The runtime patch that realises kv_cache.recalibrate on this stack ('kv_scales') hooks per-head
    attention: it takes post-RoPE q/k/v amax in Hugging Face *Attention / Megatron core_attention and pushes
    model.layers.{i}.self_attn.attn.{q,k,v}_scale (fp8spec/runtime/kv_calibration.py; the patch manifest lists
    attention gqa only). MLA (DeepSeek-V2/V3) caches one compressed latent per token (kv_lora_rank +
    qk_rope_head_dim values) under a single scale per layer, so those scales would describe tensors the cache
    never holds.""",
    "use kv_cache.recalibrate: none (scales 1.0, see KV004) or kv_cache.dtype: bf16; MLA support needs the "
    "calibrator to take amax of the latent vLLM writes (kv_a_layernorm output concatenated with the RoPE'd k_pe) "
    "and push it as the MLA attention layer's k_scale",
)
def kv_recalibration_mla(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if (
        ctx.model.attention != "mla"
        or spec.kv_cache.dtype == "bf16"
        or spec.kv_cache.recalibrate == "none"
        or ctx.native_kv_calibration()
    ):
        return
    covered = patch_attention("kv_scales")
    if ctx.model.attention not in covered:
        yield Finding(
            f"{ctx.model.id} uses MLA attention; the kv_scales patch calibrates "
            f"{', '.join(covered) or 'no'} attention only",
            "kv_cache.recalibrate",
        )


def _static_kv_fix(ctx, code: str):
    """Hint and proposals where the engine cannot honour pushed scales: a BF16 KV cache, or static scales."""
    return proposal(
        ctx,
        code,
        "kv_cache.recalibrate",
        [{"kv_cache.dtype": "bf16", "kv_cache.recalibrate": "none"}, {"kv_cache.recalibrate": "none"}],
        rule_hint(code),
    )


def _recalibrating(spec) -> bool:
    return spec.kv_cache.dtype != "bf16" and spec.kv_cache.recalibrate != "none"


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
    was applied. FA3 (Hopper) reads device tensors instead; that path was run on an H200 (BENCHMARKS.md 4.2).""",
    "on Blackwell use kv_cache.recalibrate: none (static scales, see KV004) or kv_cache.dtype: bf16; per-step "
    "scales are proven on Hopper (FLASH_ATTN)",
    needs_model=False,
)
def kv_scales_flashinfer_vllm(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if ctx.engine != "vllm" or not _recalibrating(spec):
        return
    backend = (ctx.fact("vllm", "capability.fp8_kv_attention_backend") or {}).get(ctx.gpu.arch)
    honoured = (ctx.fact("vllm", "capability.per_step_kv_scales") or {}).get(backend, True)
    if backend is not None and not honoured:
        hint, ok = _static_kv_fix(ctx, "KV006")
        yield Finding(
            f"kv_cache.recalibrate {spec.kv_cache.recalibrate} on {spec.hardware.gpu}: vLLM "
            f"{ctx.engine_version} runs {backend} there, which keeps the q/k/v scales of its first "
            "forward (pushed scales would be silently ignored)",
            "kv_cache.recalibrate",
            hint,
            ok,
        )


@rule(
    "KV007",
    "kv-scales-flashinfer-sglang",
    "error",
    "SGLang's FlashInfer decode reads the KV scales captured in its CUDA graphs.",
    """verl 0.9.1 runs SGLang >= 0.5.12 with attention_backend flashinfer by default, because FA3 CUDA-graph
    capture is broken there (verl async_sglang_server.py 289-297). SGLang's FlashInfer forward_decode writes the
    cache with the device scales layer.k_scale/v_scale but passes the host floats k_scale_float/v_scale_float
    to the decode kernel, which captured decode graphs freeze (sglang 0.5.12 flashinfer_backend.py 910-928,
    0.5.23 1521-1575): after a per-step push the cache is written with the new scale and read with the old one.""",
    "use kv_cache.recalibrate: none (static scales, see KV004), kv_cache.dtype: bf16, or rollout.engine: vllm "
    "on Hopper, where per-step scales were run in the real engine (BENCHMARKS.md 4.2)",
    needs_model=False,
)
def kv_scales_flashinfer_sglang(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if ctx.engine != "sglang" or not _recalibrating(spec):
        return
    verl_backend = ctx.fact("verl", "capability.sglang_default_attention_backend")
    decode = (ctx.fact("sglang", "capability.flashinfer_decode_kv_scales") or {}).get("decode", "")
    if verl_backend == "flashinfer" and "captured" in str(decode):
        hint, ok = _static_kv_fix(ctx, "KV007")
        yield Finding(
            f"kv_cache.recalibrate {spec.kv_cache.recalibrate} with SGLang {ctx.engine_version} under "
            "verl: FlashInfer decode keeps the k/v scales captured in its CUDA graphs while the cache is "
            "written with the pushed ones",
            "kv_cache.recalibrate",
            hint,
            ok,
        )
