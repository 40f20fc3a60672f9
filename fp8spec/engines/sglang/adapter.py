"""SGLang: engine settings inside verl and the standalone `sglang.launch_server` command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fp8spec.compiler.adapters.engine import EngineAdapter
from fp8spec.compiler.adapters.verl import add_engine_arg
from fp8spec.compiler.settings import SettingsPlan, serve_flags
from fp8spec.engines.common import ServeArg, kv_cache_dtype_arg, kv_cache_dtype_flag, sizing_flags
from fp8spec.exclusions.ignore_lists import engine_module_names
from fp8spec.patchset import manifest

if TYPE_CHECKING:
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.resolve.valid import ValidSpec


def _ignored_layers_env(plan: SettingsPlan, ctx: ValidSpec) -> None:
    """Exclusions beyond the router go to SGLANG_FP8_IGNORED_LAYERS, read both by verl's trainer-side
    quantizer and by SGLang's Fp8Config (verl/utils/sglang/sglang_fp8_utils.py)."""
    routers = set(ctx.model.symbolic_groups().get("router", ()))
    extra = [n for n in engine_module_names(ctx) if n not in routers]
    if extra:
        prof = ctx.profile("sglang")
        plan.add(
            "env",
            prof.value("env.fp8_ignored_layers"),
            ",".join(extra),
            "linear.exclude",
            f"{len(extra)} linear modules kept in BF16 beyond the router",
            prof.evidence("env.fp8_ignored_layers"),
        )


def patch_engine_args(patch: str) -> dict[str, Any]:
    """SGLang imports fp8spec's KV-scale loader only when --custom-weight-loader lists it (kv_scales; the
    loader's import path is the runtime manifest's)."""
    if patch == "kv_scales":
        return {"engine_arg.custom_weight_loader": [manifest().SGLANG_KV_LOADER]}
    return {}


def build_in_verl(plan: SettingsPlan, ctx: ValidSpec, keys: VerlKeys) -> None:
    spec = ctx.spec
    if spec.linear.quantize:
        _ignored_layers_env(plan, ctx)
        if ctx.model.is_moe:
            plan.notes.append(
                "The MoE router stays BF16: verl's trainer-side quantizer skips mlp.gate.weight by name "
                "(verl/utils/fp8_utils.py) and SGLang builds the Qwen3-MoE gate without a quant config."
            )
        plan.notes.append(
            "SGLang has no online block quantization: verl quantizes the BF16 weights to 128x128 E4M3 blocks "
            "on the trainer side at every weight sync and SGLang loads them through an injected FP8 "
            "quantization_config."
        )
    if spec.rollout.max_num_batched_tokens is not None:
        add_engine_arg(
            plan,
            keys,
            ctx,
            "engine_arg.chunked_prefill_size",
            spec.rollout.max_num_batched_tokens,
            "rollout.max_num_batched_tokens",
            "SGLang's per-step prefill budget: verl passes rollout.max_num_batched_tokens to vLLM only",
            ctx.profile("sglang").evidence("engine_arg.chunked_prefill_size"),
        )
    if spec.kv_cache.fp8:
        kv_cache_dtype_arg(plan, keys, ctx, "FP8 KV cache (SGLang spells it fp8_e4m3; plain fp8 is rejected)")


def build_serve(plan: SettingsPlan, ctx: ValidSpec) -> list[str]:
    spec, prof = ctx.spec, ctx.profile("sglang")
    argv = prof.value("cli.serve").split()
    args: list[ServeArg] = [
        ("flag.model_path", spec.model.path, "model.path", "the FP8 policy's BF16 checkpoint"),
    ]
    if spec.linear.quantize:
        args.append(
            (
                "flag.quantization",
                "fp8",
                "linear.quantize",
                "SGLang's online FP8 is per-channel; block FP8 needs an FP8-serialized checkpoint",
            )
        )
        _ignored_layers_env(plan, ctx)
        plan.notes.append(
            "Standalone SGLang quantizes a BF16 checkpoint per output channel, not in 128x128 blocks "
            "(block-wise online quantization is sglang PR #15440, open). For an exact block-FP8 evaluation, "
            "serve an FP8 checkpoint quantized with fp8spec.runtime.quantization.blockquant."
        )
    if spec.kv_cache.fp8:
        args.append(kv_cache_dtype_flag(spec))
    args += sizing_flags(
        spec,
        "flag.tp_size",
        "flag.mem_fraction_static",
        "flag.context_length",
        "flag.max_running_requests",
        "flag.chunked_prefill_size",
    )
    return argv + serve_flags(plan, prof, args)


class SGLangAdapter(EngineAdapter):
    def build_in_verl(self, plan: SettingsPlan, valid: ValidSpec, keys: VerlKeys) -> None:
        build_in_verl(plan, valid, keys)

    def build_serve(self, plan: SettingsPlan, valid: ValidSpec) -> list[str]:
        return build_serve(plan, valid)

    def patch_engine_args(self, patch: str) -> dict[str, Any]:
        return patch_engine_args(patch)


ADAPTER = SGLangAdapter()
