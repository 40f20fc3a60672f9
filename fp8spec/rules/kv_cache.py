"""FP8 KV cache: how q/k/v scales are (re)calibrated. What one engine's attention backends accept or ignore is in
that engine's folder (fp8spec/engines/<name>/rules.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.patchset import patch_attention, patch_supports
from fp8spec.rules.examples import DEEPSEEK, Examples, fragment
from fp8spec.rules.proposals import cost_key, proposal
from fp8spec.rules.registry import Finding, rule, rule_hint

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "KV002",
    "kv-recalibration-unrealisable",
    "error",
    "The requested KV-scale recalibration cannot be realised on this engine version.",
    """The paper re-armed vLLM's calculate_kv_scales after every weight sync. vLLM removed that option
    (deprecated in vLLM #37201, removed in vLLM #49389; 0.33 has no such field), verl never merged the re-arming
    (verl PR #4435 is open), and SGLang never had it (sglang #6518). Per-step scales therefore come from the
    fp8spec runtime patch 'kv_scales', which must know the engine version.""",
    "use an engine version the runtime patch supports (listed in the message), or kv_cache.recalibrate: none",
    needs_model=False,
    # every profiled version is supported: a version without a profile (REF002 fires too) shows the rule
    examples=Examples(
        bad={"stack": {"vllm": "0.99.0"}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
        good={"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
        message="supports vllm 0.24.0",
    ),
)
def kv_recalibration_unrealisable(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if not spec.kv_cache.recalibrating:
        return
    engine, version = ctx.engine.name, ctx.engine_version
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
    "KV004",
    "kv-fp8-uncalibrated",
    "warning",
    "FP8 KV cache with no calibration runs with scales of 1.0.",
    """Without a checkpoint or pushed scales, vLLM (since vLLM #49389) and SGLang fall back to k/v scales of 1.0
    ("Defaulting to scaling factors of 1.0"); sgl-cookbook #237 removed fp8_e4m3 KV from recipes because
    uncalibrated scales degraded reasoning accuracy.""",
    "calibrate the scales (kv_cache.recalibrate) where the engine and model allow it, or use a BF16 KV cache",
    needs_model=False,
    scope="engine",
    examples=Examples(
        bad={"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}},
        good={"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
        message="scales of 1.0",
    ),
)
def kv_uncalibrated(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.kv_cache.fp8 and spec.kv_cache.recalibrate == "none":
        # per_step is refused on MLA models (KV005) and under SGLang's FlashInfer decode (KV007): proposed
        # only where every rule takes it; a BF16 KV cache always removes the finding
        hint, ok = proposal(
            ctx,
            "KV004",
            "kv_cache.recalibrate",
            [
                {"kv_cache.recalibrate": "per_step"},
                {"kv_cache.recalibrate": "once"},
                {"kv_cache.dtype": "bf16"},
            ],
            rule_hint("KV004"),
        )
        yield Finding(
            f"kv_cache.dtype {spec.kv_cache.dtype} with recalibrate none uses scales of 1.0",
            "kv_cache.recalibrate",
            hint,
            ok,
        )


@rule(
    "KV005",
    "kv-recalibration-mla",
    "error",
    "Per-step KV-scale recalibration is not implemented for MLA attention.",
    """The runtime patch that realises kv_cache.recalibrate on this stack ('kv_scales') hooks per-head
    attention: it takes post-RoPE q/k/v amax in Hugging Face *Attention / Megatron core_attention and pushes
    model.layers.{i}.self_attn.attn.{q,k,v}_scale (fp8spec/runtime/kv_scales/kv_calibration.py; the patch manifest lists
    attention gqa only). MLA (DeepSeek-V2/V3) caches one compressed latent per token (kv_lora_rank +
    qk_rope_head_dim values) under a single scale per layer, so those scales would describe tensors the cache
    never holds.""",
    "use kv_cache.recalibrate: none (scales 1.0, see KV004) or kv_cache.dtype: bf16; MLA support needs the "
    "calibrator to take amax of the latent vLLM writes (kv_a_layernorm output concatenated with the RoPE'd k_pe) "
    "and push it as the MLA attention layer's k_scale",
    examples=Examples(
        bad=fragment(
            DEEPSEEK, {"rollout": {"tp": 8}, "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}
        ),
        good=fragment(DEEPSEEK, {"rollout": {"tp": 8}, "kv_cache": {"dtype": "bf16"}}),
        message="uses MLA attention",
    ),
)
def kv_recalibration_mla(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if ctx.known_model.attention != "mla" or not spec.kv_cache.recalibrating or ctx.native_kv_calibration():
        return
    covered = patch_attention("kv_scales")
    if ctx.known_model.attention not in covered:
        yield Finding(
            f"{ctx.known_model.id} uses MLA attention; the kv_scales patch calibrates "
            f"{', '.join(covered) or 'no'} attention only",
            "kv_cache.recalibrate",
        )


def static_kv_fix(ctx: ResolvedSpec, code: str) -> tuple[str, tuple]:
    """Hint and proposals where the engine cannot honour pushed scales: a BF16 KV cache, or static scales
    (the FlashInfer rules of the engines' folders, KV006 and KV007)."""
    return proposal(
        ctx,
        code,
        "kv_cache.recalibrate",
        [{"kv_cache.dtype": "bf16", "kv_cache.recalibrate": "none"}, {"kv_cache.recalibrate": "none"}],
        rule_hint(code),
    )


# A model whose attention has no QK-norm (KV008's examples).
QWEN25 = {"model": {"name": "Qwen/Qwen2.5-7B", "path": "/models/Qwen2.5-7B"}}


@rule(
    "KV008",
    "kv-fp8-without-qk-norm",
    "warning",
    "FP8 KV cache on a model whose attention has no QK-norm (Qwen2.5 / Llama / Mistral class).",
    """Reported, not reproduced here: verl PR #4435 (FP8 KV cache for vLLM rollouts), comment of 2026-03-29:
    Qwen2.5-Math-7B GRPO on MATH with an FP8 KV cache fell to about 0 accuracy with garbage responses, while
    Qwen3-8B-Base trained fine in the same set-up (the reporter attributes it to Qwen3's QK-norm, which curbs
    key outliers); vLLM PR #11906: an FP8 KV cache
    costs Qwen2-7B most (perplexity 34.84 with scales of 1.0, 22.62 with computed scales); HabanaAI/vllm-fork
    PR #1598 turned the FP8 KV cache off for Qwen2.5-7B-Instruct. Which architectures normalize q/k per head is
    the catalog's ModelFacts.qk_norm (checked against transformers' modules); the report is recorded in
    backends/verl/0.9.1.yaml (risk.fp8_kv_without_qk_norm). MLA models (DeepSeek) cache a normalized latent and
    are not covered by the report.""",
    "use kv_cache.dtype: bf16 for this model (the FP8 W8A8 linears stay), or compare rollout accuracy against a "
    "BF16-KV run first and then acknowledge KV008",
    acknowledgeable=True,
    examples=Examples(
        bad=fragment(QWEN25, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}),
        good=({"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}, fragment(QWEN25)),
        message="no QK-norm",
    ),
)
def kv_fp8_without_qk_norm(ctx: ResolvedSpec) -> Iterator[Finding]:
    model = ctx.known_model
    if not ctx.spec.kv_cache.fp8 or model.attention != "gqa" or model.qk_norm:
        return
    risk = ctx.fact("verl", "risk.fp8_kv_without_qk_norm") or {}
    seen = "; ".join(f"{r['model']}: {r['outcome']}" for r in risk.get("reported", [])[:1])
    # where bf16 brings another warning (MEM004's preemption), the value-free advice: values are promises
    otherwise = (
        "use a BF16 KV cache for this model (the FP8 W8A8 linears stay), or compare rollout accuracy against a "
        "BF16-KV run first and then acknowledge KV008"
    )
    pairs, costs = _bf16_that_fits(ctx)
    hint, ok = proposal(ctx, "KV008", "kv_cache.dtype", [bf16_kv(ctx)], otherwise, pairs, costs)
    yield Finding(
        f"kv_cache.dtype {ctx.spec.kv_cache.dtype} on {model.id} ({model.architecture}), whose attention has no "
        f"QK-norm: FP8 KV caches broke RL runs of such models" + (f" (reported: {seen})" if seen else ""),
        "kv_cache.dtype",
        hint,
        ok,
        tuple(costs.get(cost_key(p), "") for p in ok),
    )


def _bf16_that_fits(ctx: ResolvedSpec) -> tuple[list[dict], dict]:
    """A BF16 KV cache together with the rollout.max_num_seqs whose sequences it holds at full length: where
    bf16 alone makes the engine preempt (MEM004), this pair may pass every rule (checked, as every proposal).
    With what the cap costs the rollout (fp8spec.plan.verdict.capped_throughput_loss)."""
    from fp8spec.plan.plan import spec_memory_plan
    from fp8spec.plan.verdict import capped_throughput_loss, concurrency_cost

    plan = spec_memory_plan(ctx)
    if plan is None:
        return [], {}
    key = "fp8" if ctx.spec.linear.quantize else "bf16"  # the spec's linears with a BF16 KV cache
    column = next((r for r in plan.rollout if r.choice.key == key), None)
    if column is None or column.kv_shortfall is not None or not 1 <= int(column.concurrency) < column.running:
        return [], {}
    cap = int(column.concurrency)
    pair = {**bf16_kv(ctx), "rollout.max_num_seqs": cap}
    r = ctx.spec.rollout
    loss = capped_throughput_loss(column, cap, r.max_prompt_length, r.max_response_length)
    return [pair], {cost_key(pair): concurrency_cost(column.running, cap, loss)}


def bf16_kv(ctx: ResolvedSpec) -> dict:
    """A BF16 KV cache as a proposal: with recalibrate none where the spec recalibrates, so no FP8 scale setting is
    left under a cache that has no scales."""
    if ctx.spec.kv_cache.recalibrate == "none":
        return {"kv_cache.dtype": "bf16"}
    return {"kv_cache.dtype": "bf16", "kv_cache.recalibrate": "none"}
