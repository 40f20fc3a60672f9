"""The weight-sync path a spec gets: which quantizer re-quantizes the weights at every sync. `fp8spec compile`
activates that path's runtime patch and `fp8spec plan` times that path's sync, so both read it here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.engines.base import Engine
    from fp8spec.specfile.model import Spec


class SpecFacts(Protocol):
    """What the choice reads: a ValidSpec when compiling, the plan's ResolvedSpec (its model resolved) when
    planning."""

    @property
    def spec(self) -> Spec: ...

    @property
    def model(self) -> Optional[ModelFacts]: ...

    @property
    def engine(self) -> Engine: ...

    def fact(self, kind: str, fact_id: str, default: Any = None) -> Any: ...


def sync_quantizer(ctx: SpecFacts) -> str | None:
    """The weight-sync quantizer a verl bundle uses: 'verl', 'fp8spec', 'direct', or None without FP8 linears.

    auto picks 'direct' where ``direct_shown`` holds, else 'fp8spec' where the profile records fast_block_quant
    byte-exact in the real engine and run inside an RL loop, else 'verl'. All three write the same FP8 bytes where
    they are picked (the reference quantization; verl's own differs in 0.2 % of codes,
    measured:quant.verl_kernel.codes_differing_pct)."""
    spec = ctx.spec
    if not spec.linear.quantize:
        return None
    if spec.linear.sync_quantizer != "auto":
        return spec.linear.sync_quantizer
    if direct_shown(ctx):
        return "direct"
    # auto: the fast quantizer only where the engine's profile records it byte-exact in the real engine AND run
    # inside an RL loop (the bundle's activation in the processes that quantize: the engine's on vLLM, the
    # trainer's on SGLang); an explicit fp8spec needs only the first (rule BLK005)
    engine = ctx.engine.name
    shown = all(
        ctx.fact(engine, fact, False) is True
        for fact in ("verified.fast_block_quant_in_engine", "verified.fast_block_quant_in_loop")
    )
    return "fp8spec" if shown else "verl"


def direct_shown(ctx: SpecFacts) -> bool:
    """Whether the direct path was shown for this configuration: byte-exact in the real engine
    (``verified.direct_sync_in_engine``) at this rollout tp (``verified.direct_sync_max_tp``), with FP32 block
    scales (the only ones it writes, rule BLK006), and trained inside an RL loop with this trainer on this kind of
    model (``verified.direct_sync_in_loop``: ``"<training.backend>/<dense|moe>"`` entries)."""
    spec, engine = ctx.spec, ctx.engine.name
    if not ctx.engine.direct_sync_plan or spec.linear.scale_dtype != "fp32":
        return False
    if ctx.fact(engine, "verified.direct_sync_in_engine", False) is not True:
        return False
    if spec.rollout.tp > int(ctx.fact(engine, "verified.direct_sync_max_tp", 1)):
        return False
    if ctx.model is None:  # a spec whose model is unknown: nothing was shown for it
        return False
    kind = "moe" if ctx.model.is_moe else "dense"
    return f"{spec.training.backend}/{kind}" in (ctx.fact(engine, "verified.direct_sync_in_loop", []) or [])
