"""vLLM: engine settings inside verl (engine_kwargs, environment) and the standalone `vllm serve` command."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from fp8spec.compiler.adapters.engine import EngineAdapter
from fp8spec.compiler.adapters.verl import add_engine_arg
from fp8spec.compiler.settings import SettingsPlan, serve_flags
from fp8spec.engines.common import ServeArg, kv_cache_dtype_arg, kv_cache_dtype_flag, sizing_flags
from fp8spec.exclusions.ignore_lists import all_engine_names, compress, engine_module_names

if TYPE_CHECKING:
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.resolve.valid import ValidSpec


def _deep_gemm_env(plan: SettingsPlan, ctx: ValidSpec) -> None:
    prof = ctx.profile("vllm")
    env = prof.value("env.deep_gemm_e8m0")
    value = "0" if ctx.spec.linear.scale_dtype == "fp32" else "1"
    why = (
        "keep FP32 block scales: DeepGEMM would otherwise re-quantize them to UE8M0 (a second rounding)"
        if value == "0"
        else "UE8M0 block scales for DeepGEMM"
    )
    plan.add("env", env["name"], value, "linear.scale_dtype", why, prof.evidence("env.deep_gemm_e8m0"))
    if ctx.spec.linear.deep_gemm is not None:
        use = prof.value("env.use_deep_gemm")
        on = ctx.spec.linear.deep_gemm
        plan.add(
            "env",
            use["name"],
            "1" if on else "0",
            "linear.deep_gemm",
            "block-FP8 linears on DeepGEMM (its kernels compile at engine start)"
            if on
            else "block-FP8 linears on CUTLASS/Triton: no DeepGEMM kernel compilation at engine start",
            prof.evidence("env.use_deep_gemm"),
        )


def build_in_verl(plan: SettingsPlan, ctx: ValidSpec, keys: VerlKeys) -> None:
    spec = ctx.spec
    prof = ctx.profile("vllm")
    if spec.linear.quantize:
        _deep_gemm_env(plan, ctx)
        ignored = engine_module_names(ctx)
        default = sorted(ctx.model.symbolic_groups().get("router", ()))
        if ignored and sorted(ignored) == default:
            plan.notes.append(
                f"The MoE router ({len(default)} modules) stays BF16 through verl's own FP8 config, which lists "
                "model.layers.{i}.mlp.gate in vLLM's ignored_layers (verl profile: capability.vllm_router_auto_ignored)."
            )
        if sorted(ignored) != default:
            # verl's own config ignores only model.layers.{i}.mlp.gate; engine_kwargs.hf_overrides replaces it
            # (vllm_async_server.py builds args {..., "hf_overrides": ..., **engine_kwargs}).
            config = dict(ctx.profile("verl").value("rollout.vllm_fp8_quant_config"))
            config[prof.value("quantization_config.fp8_block_size_key")] = list(spec.linear.block_size)
            config[prof.value("quantization_config.fp8_ignored_layers_key")] = ignored
            add_engine_arg(
                plan,
                keys,
                ctx,
                "engine_arg.hf_overrides",
                {prof.value("hf_config.quantization_config"): config},
                "linear.exclude",
                f"{len(ignored)} linear modules kept in BF16 (exclusions and BF16 first/last layers)",
                keys.evidence("key.rollout_engine_kwargs"),
            )
    if spec.kv_cache.fp8:
        kv_cache_dtype_arg(plan, keys, ctx)
        if spec.kv_cache.recalibrate == "once" and ctx.native_kv_calibration():
            add_engine_arg(
                plan,
                keys,
                ctx,
                "engine_arg.calculate_kv_scales",
                True,
                "kv_cache.recalibrate",
                "vLLM calibrates q/k/v scales on its first forward (never re-armed)",
                prof.evidence("flag.calculate_kv_scales"),
            )


def build_serve(plan: SettingsPlan, ctx: ValidSpec) -> list[str]:
    """argv of a standalone `vllm serve` for evaluating the FP8 policy (online block quantization)."""
    spec, prof = ctx.spec, ctx.profile("vllm")
    argv = prof.value("cli.serve").split() + [spec.model.path]
    args: list[ServeArg] = []
    if spec.linear.quantize:
        method = prof.value("block_fp8.quantization")
        args.append(
            (
                "flag.quantization",
                method,
                "linear.quantize",
                "online 128x128 block FP8: vLLM quantizes the BF16 checkpoint at load",
            )
        )
        match = prof.value("ignore.match")
        style = "fnmatch" if "fnmatch" in match else "regex" if "re:" in match else "exact"
        ignore = compress(engine_module_names(ctx), all_engine_names(ctx), style)
        if ignore:
            config = {
                prof.value("quantization_config.linear_key"): method,
                prof.value("quantization_config.ignore_key"): ignore,
            }
            if ctx.model.is_moe:
                config[prof.value("quantization_config.moe_key")] = method
            args.append(
                (
                    "flag.quantization_config",
                    json.dumps(config, separators=(",", ":")),
                    "linear.exclude",
                    f"keep {len(ignore)} module pattern(s) in BF16 ({style} matching in vLLM {prof.version})",
                )
            )
        _deep_gemm_env(plan, ctx)
    if spec.kv_cache.fp8:
        args.append(kv_cache_dtype_flag(spec))
        if spec.kv_cache.recalibrate != "none" and prof.value("flag.calculate_kv_scales"):
            args.append(
                (
                    "flag.calculate_kv_scales",
                    None,
                    "kv_cache.recalibrate",
                    "calibrate q/k/v scales once; vLLM does it on the profiling dummy run at start "
                    "(capability.calculate_kv_scales), not on real prompts",
                )
            )
        elif spec.kv_cache.recalibrate != "none":
            plan.notes.append(
                f"vLLM {prof.version} has no calculate_kv_scales and a BF16 checkpoint carries no KV scales, so this "
                "standalone server runs its FP8 KV cache with q/k/v scales of 1.0 (per-step calibration exists only "
                "inside a training run, through the kv_scales runtime patch). Compare against a BF16 KV server."
            )
    args += sizing_flags(
        spec,
        "flag.tensor_parallel_size",
        "flag.gpu_memory_utilization",
        "flag.max_model_len",
        "flag.max_num_seqs",
        "flag.max_num_batched_tokens",
    )
    return argv + serve_flags(plan, prof, args)


class VLLMAdapter(EngineAdapter):
    def build_in_verl(self, plan: SettingsPlan, valid: ValidSpec, keys: VerlKeys) -> None:
        build_in_verl(plan, valid, keys)

    def build_serve(self, plan: SettingsPlan, valid: ValidSpec) -> list[str]:
        return build_serve(plan, valid)


ADAPTER = VLLMAdapter()
