"""SGLang's own rules: what its attention backends and scale formats do (run only for specs on SGLang)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.kv_cache import static_kv_fix
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


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
    engine="sglang",
    examples=Examples(
        bad={"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "fp8_e4m3"}},
        good={"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "bf16"}},
        message="unscaled",
    ),
)
def sglang_q_scale(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.kv_cache.fp8:
        yield Finding("SGLang applies k/v scales only; the query is cast to FP8 unscaled", "kv_cache.dtype")


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
    engine="sglang",
    examples=Examples(
        bad={"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
        good=(
            {"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}},
            {"rollout": {"engine": "vllm"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
        ),
        message="captured in its CUDA graphs",
    ),
)
def kv_scales_flashinfer_sglang(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.kv_cache.recalibrating:
        return
    verl_backend = ctx.fact("verl", "capability.sglang_default_attention_backend")
    decode = (ctx.fact("sglang", "capability.flashinfer_decode_kv_scales") or {}).get("decode", "")
    if verl_backend == "flashinfer" and "captured" in str(decode):
        hint, ok = static_kv_fix(ctx, "KV007")
        yield Finding(
            f"kv_cache.recalibrate {spec.kv_cache.recalibrate} with SGLang {ctx.engine_version} under "
            "verl: FlashInfer decode keeps the k/v scales captured in its CUDA graphs while the cache is "
            "written with the pushed ones",
            "kv_cache.recalibrate",
            hint,
            ok,
        )


@rule(
    "HW004",
    "sglang-ue8m0-needs-blackwell",
    "error",
    "SGLang uses UE8M0 scales only on Blackwell.",
    """SGLang sets DEEPGEMM_SCALE_UE8M0 only for SM100/SM120 (layers/deep_gemm_wrapper/configurer.py) and
    has no UE8M0 switch for Hopper; on an H100/H200 it would serve the scales as FP32, so a ue8m0 spec
    would not run what it says.""",
    "use linear.scale_dtype: fp32 with SGLang on Hopper",
    needs_model=False,
    engine="sglang",
    examples=Examples(
        bad={"rollout": {"engine": "sglang"}, "linear": {"scale_dtype": "ue8m0"}},
        good={"rollout": {"engine": "sglang"}, "linear": {"scale_dtype": "fp32"}},
        message="only on Blackwell",
    ),
)
def sglang_ue8m0(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec, gpu = ctx.spec, ctx.gpu
    if spec.linear.quantize and spec.linear.scale_dtype == "ue8m0" and not gpu.is_blackwell:
        hint, ok = proposal(ctx, "HW004", "linear.scale_dtype", [{"linear.scale_dtype": "fp32"}], "")
        yield Finding(
            f"SGLang serves UE8M0 scales only on Blackwell; {gpu.name} is {gpu.arch}",
            "linear.scale_dtype",
            hint,
            ok,
        )
