"""What every rollout engine's adapter emits the same way, under the engine's own key and flag names (from its
profile): the FP8 KV cache's dtype inside verl and on a standalone server, and a server's sizing flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8spec.compiler.adapters.verl import add_engine_arg

if TYPE_CHECKING:
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.resolve.valid import ValidSpec
    from fp8spec.specfile.model import Spec

# (flag id in the engine's profile, value, spec field, why): what serve_flags turns into argv
ServeArg = tuple[str, object, str, str]


def kv_cache_dtype_arg(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec, why: str = "FP8 KV cache") -> None:
    """kv_cache.dtype as the engine argument inside verl; both engines take the spec's spelling (fp8_e4m3)."""
    add_engine_arg(
        plan,
        keys,
        ctx,
        "engine_arg.kv_cache_dtype",
        ctx.spec.kv_cache.dtype,
        "kv_cache.dtype",
        why,
        ctx.profile(ctx.engine.name).evidence("flag.kv_cache_dtype"),
    )


def kv_cache_dtype_flag(spec: Spec) -> ServeArg:
    return ("flag.kv_cache_dtype", spec.kv_cache.dtype, "kv_cache.dtype", "FP8 KV cache")


def sizing_flags(
    spec: Spec, tp: str, memory_share: str, context_length: str, max_seqs: str, batched_tokens: str
) -> list[ServeArg]:
    """Tensor parallel size, GPU memory share, context length and batch limits, under the engine's flag ids.
    The context is rollout.max_model_len, else prompt + response; the batch limits only when the spec sets
    them (the server's own defaults otherwise)."""
    r = spec.rollout
    out: list[ServeArg] = [
        (tp, r.tp, "rollout.tp", "tensor parallel size"),
        (memory_share, r.gpu_memory_utilization, "rollout.gpu_memory_utilization", "GPU memory share"),
    ]
    if r.max_model_len is not None:
        out.append((context_length, r.max_model_len, "rollout.max_model_len", "longest sequence served"))
    else:
        out.append(
            (
                context_length,
                r.max_prompt_length + r.max_response_length,
                "rollout.max_prompt_length",
                "prompt + response length",
            )
        )
    if r.max_num_seqs is not None:
        out.append((max_seqs, r.max_num_seqs, "rollout.max_num_seqs", "sequences run at once"))
    if r.max_num_batched_tokens is not None:
        out.append(
            (
                batched_tokens,
                r.max_num_batched_tokens,
                "rollout.max_num_batched_tokens",
                "tokens per engine step",
            )
        )
    return out
