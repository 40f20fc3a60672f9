"""References: the model must be known (catalog or local config.json) and every pinned version profiled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "REF001",
    "model-unresolved",
    "error",
    "The model is not in the catalog, or its config.json cannot be used.",
    """Every FP8 check needs the model's real shapes and module names. fp8spec never downloads: a model
    outside the embedded catalog needs model.config_path pointing at a local Hugging Face config.json of a
    supported architecture.""",
    "use a catalog id (`fp8spec models` lists them), or point model.config_path at a local config.json of a "
    "supported architecture",
    needs_model=False,
    scope="engine",
    examples=Examples(
        bad={"model": {"name": "Qwen/Qwen3-8B-Bse"}},
        good={"model": {"name": "Qwen/Qwen3-8B-Base"}},
        message="Qwen/Qwen3-8B-Base",
    ),
)
def model_unresolved(ctx: ResolvedSpec) -> Iterator[Finding]:
    if not ctx.model_error:
        return
    if ctx.model_error_path == "model.config_path":
        hint = (
            "model.config_path must name a readable Hugging Face config.json of a supported architecture "
            "(the message says what is wrong with this one); or remove it to use a catalog id in model.name"
        )
    else:
        hint = (
            "use a catalog id in model.name (`fp8spec models` lists them), or set model.config_path to a "
            "local config.json"
        )
    yield Finding(ctx.model_error, ctx.model_error_path, hint)


@rule(
    "REF002",
    "stack-version-unprofiled",
    "error",
    "A pinned backend version has no backend profile.",
    """fp8spec only emits keys, flags and environment variables it has verified for a backend release
    (backends/<package>/<version>.yaml, each fact with its evidence). An unprofiled version could have
    renamed or removed any of them.""",
    "pin a profiled version (listed in the message), or add a profile for the new release",
    needs_model=False,
    scope="engine",
    examples=Examples(
        bad={"stack": {"vllm": "0.99.0"}}, good={"stack": {"vllm": "0.24.0"}}, message="0.24.0"
    ),
)
def stack_unprofiled(ctx: ResolvedSpec) -> Iterator[Finding]:
    for stack_field, message in sorted(ctx.missing_profiles.items()):
        yield Finding(message, f"stack.{stack_field}")


@rule(
    "REF003",
    "engine-version-not-verl-pinned",
    "warning",
    "The rollout engine version is not the one verl pins.",
    """verl's wheel pins the engine it is tested with (verl 0.9.1: vllm==0.24.0, sglang==0.5.12 in its
    METADATA extras). verl's FP8 refit patches vLLM internals that change between releases (verl #5683,
    #6393), so another engine version may fail at the first weight sync.""",
    "pin the engine version verl supports, or accept the risk",
    needs_model=False,
    examples=Examples(
        bad={"stack": {"vllm": "0.33.0"}},
        good={"stack": {"vllm": "0.24.0"}},
        message="tested with vllm 0.24.0",
    ),
)
def engine_not_pinned(ctx: ResolvedSpec) -> Iterator[Finding]:
    pinned = ctx.fact("verl", f"supports.{ctx.engine.name}")
    if pinned and str(pinned) != ctx.engine_version:
        yield Finding(
            f"verl {ctx.spec.stack.verl} is tested with {ctx.engine.name} {pinned}, not {ctx.engine_version}",
            f"stack.{ctx.engine.name}",
        )
