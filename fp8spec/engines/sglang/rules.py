"""SGLang's own rules: what its attention backends and scale formats do (run only for specs on SGLang)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.kv_cache import bf16_kv, static_kv_fix
from fp8spec.rules.memory import no_memory_plan
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule, rule_hint

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
    scope="engine",
    examples=Examples(
        bad={"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "fp8_e4m3"}},
        good={"rollout": {"engine": "sglang"}, "kv_cache": {"dtype": "bf16"}},
        message="unscaled",
    ),
)
def sglang_q_scale(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.kv_cache.fp8:
        # a BF16 KV cache is proposed only where it adds no finding of its own (it may bring back MEM004)
        hint, ok = proposal(
            ctx,
            "KV003",
            "kv_cache.dtype",
            [bf16_kv(ctx)],
            "accept it, or use vLLM (FA3 applies the q scale), or a BF16 KV cache",
        )
        yield Finding(
            "SGLang applies k/v scales only; the query is cast to FP8 unscaled", "kv_cache.dtype", hint, ok
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
    "on Hopper, where per-step scales were run in the real engine (docs/results.md#kv-scales)",
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
    scope="engine",
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


@rule(
    "BLK008",
    "sglang-fp8-relayout-breaks-refit",
    "error",
    "SGLang re-lays the block-FP8 weights after loading on this GPU, and its weight update never redoes it.",
    """On Blackwell SGLang 0.5.12 runs block-FP8 linears and experts on DeepGEMM by default and, once the model
    has loaded, re-quantizes every FP8 weight against power-of-two scales and replaces its float32
    (N/128, K/128) scale tensor by a packed, per-row UE8M0 one (quantization/fp8.py:513-538 and :1226-1245,
    fp8_utils.py:1209-1296; profile fact capability.fp8_block_relayout_by_arch). Its update_weights_from_tensor
    only calls the model's load_weights (model_runner.py:2070-2098; capability.weight_update_reprocesses), and
    verl 0.9.1's SGLang sync sends checkpoint-layout weights and float32 block scales through it
    (sglang_rollout.py:359-384), so after the first sync the engine's weights and scales no longer match the
    layout its kernels read. Reported in the field: sglang PR #25692 (an RL update loads canonical weights into a packed layout;
    the fix re-runs process_weights_after_loading), verl PR #7519 (SGLang's update path never rebuilds derived
    scale copies; its MXFP8 loader re-runs process_weights_after_loading after load_weights). On Hopper SGLang keeps
    the checkpoint layout; its sync there ran on an H200 (docs/results.md#weight-sync).""",
    "on Blackwell keep SGLang with linear.quantize: false (BF16 linears), or use "
    "rollout.engine: vllm (verl's vLLM sync re-processes layers whose layout changed)",
    engine="sglang",
    examples=Examples(
        bad={
            "rollout": {"engine": "sglang"},
            "hardware": {"gpu": "b200"},
            "linear": {"scale_dtype": "ue8m0"},
        },
        good=(
            {"rollout": {"engine": "sglang"}},
            {"rollout": {"engine": "sglang"}, "hardware": {"gpu": "b200"}, "linear": {"quantize": False}},
        ),
        message="deep_gemm_ue8m0",
    ),
)
def sglang_fp8_relayout_breaks_refit(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    relayout = (ctx.fact("sglang", "capability.fp8_block_relayout_by_arch") or {}).get(ctx.gpu.arch)
    reprocesses = ctx.fact("sglang", "capability.weight_update_reprocesses", True)
    if not spec.linear.quantize or not relayout or reprocesses:
        return
    hint, ok = proposal(
        ctx,
        "BLK008",
        "linear.quantize",
        # the user's engine first kept (fp8spec init applies the first proposal): BF16 linears, else vLLM
        [{"linear.quantize": False}, {"rollout.engine": "vllm"}],
        rule_hint("BLK008"),
    )
    yield Finding(
        f"linear.quantize on {spec.hardware.gpu}: SGLang {ctx.engine_version} re-lays the block-FP8 weights after "
        f"loading ({relayout}), and its weight update only reloads them: every weight sync writes checkpoint-layout "
        "weights and float32 block scales where its kernels read the re-laid ones",
        "linear.quantize",
        hint,
        ok,
    )


@rule(
    "PAR015",
    "sglang-one-slot-short",
    "warning",
    "SGLang runs one request fewer than rollout.max_num_seqs while a prompt is chunked, and a step takes one more "
    "wave of full-length responses.",
    """verl passes rollout.max_num_seqs to SGLang as max_running_requests. SGLang 0.5.12 counts the request
    whose prompt is being chunked twice when it fills a batch (scheduler.py:2606-2609, 2724-2725), so it runs at
    most max_num_seqs - 1 requests at once, and the one left waits until a running request finishes. Run on
    the H200 with verl's 256 and 256 sequences: 255 ran, the last one ran alone after all the others
    (docs/results.md#rollout-throughput, 22 % of that generation); with 257 all 256 ran at once and the same
    generation took 40.0 s instead of 50.9 s (Qwen3-8B, W8A8 + FP8 KV;
    measured:rollout.sglang.qwen3_8b.w8a8_fp8kv_generate_s_256_257). It costs a step an extra wave of decode at a tiny batch when
    the responses run to max_response_length (a randomly initialised model's always do; early long-reasoning
    RL often does) and the KV cache holds them all; with responses of varied length the lost slot costs
    1/max_num_seqs.""",
    "rollout.max_num_seqs one above the sequences per wave (max_running_requests - 1 = the wave; run on the "
    "H200: 257 ran all 256 at once), or accept it",
    engine="sglang",
    acknowledgeable=True,
    skip_when=no_memory_plan,
    examples=Examples(
        bad={
            "rollout": {"engine": "sglang", "n": 8, "max_num_seqs": 64, "max_response_length": 2048},
            "kv_cache": {"dtype": "bf16"},
            "linear": {"quantize": False},
        },
        good={
            "rollout": {"engine": "sglang", "n": 8, "max_num_seqs": 65, "max_response_length": 2048},
            "kv_cache": {"dtype": "bf16"},
            "linear": {"quantize": False},
        },
        message="one fewer",
    ),
)
def sglang_one_slot_short(ctx: ResolvedSpec) -> Iterator[Finding]:
    from fp8spec.plan.plan import spec_memory_plan

    if not ctx.fact("sglang", "capability.admission_with_chunked_prefill"):
        return
    plan = spec_memory_plan(ctx)
    if plan is None:
        return
    r = plan.spec_rollout
    slots, sequences = plan.setup.max_num_seqs, r.sequences_per_replica
    # only where slots are what limits the engine: the KV cache holds max_num_seqs responses at full length
    if slots < 2 or r.kv_shortfall is not None or r.concurrency < slots:
        return
    # a step's prompts fit one prefill chunk: no request is ever chunked
    if sequences * ctx.spec.rollout.max_prompt_length <= plan.setup.max_num_batched_tokens:
        return
    waves, real = -(-sequences // slots), -(-sequences // (slots - 1))
    if real <= waves:
        return
    alone = sequences - (real - 1) * (slots - 1)
    hint, ok = proposal(
        ctx,
        "PAR015",
        "rollout.max_num_seqs",
        [{"rollout.max_num_seqs": slots + 1}],
        rule_hint("PAR015"),
    )
    yield Finding(
        f"SGLang {ctx.engine_version} runs at most {slots - 1} of rollout.max_num_seqs {slots} requests at once "
        f"while a prompt is chunked (one fewer, as run on the H200): the {sequences} sequences per replica take "
        f"{real} waves instead of {waves}, the last with {alone} sequence{'s' if alone > 1 else ''} alone when "
        "responses run to max_response_length",
        "rollout.max_num_seqs",
        hint,
        ok,
    )
