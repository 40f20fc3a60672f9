"""MoE routing between rollout and trainer: router replay where verl supports it, and FP8 routing drift."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import MEGATRON_FP8, MOE, Examples, fragment
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "MOE001",
    "router-replay-needs-megatron",
    "error",
    "Router replay needs the Megatron trainer.",
    """verl 0.9.1 keeps router_replay in the Megatron (and VeOmni) engine config
    (actor_rollout_ref.actor.megatron.router_replay.mode, engine/megatron.yaml:123-132) and treats every other
    strategy as disabled (verl/workers/engine_workers.py:498-505); the FSDP tree has no such key.""",
    "set training.router_replay: disabled, or train on Megatron (training.backend: megatron or --backend "
    "megatron+<engine>; not checked here: its memory plan differs, validate again)",
    needs_model=False,
    examples=Examples(
        bad={"training": {"router_replay": "R3"}},
        good=fragment(MOE, MEGATRON_FP8, {"training": {"router_replay": "R3"}}),
        message="no effect with training.backend fsdp",
    ),
)
def replay_needs_megatron(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.training
    if t.router_replay != "disabled" and not ctx.trainer.router_replay:
        yield Finding(
            f"training.router_replay {t.router_replay} has no effect with training.backend {t.backend}",
            "training.router_replay",
        )


@rule(
    "MOE002",
    "router-replay-dense-model",
    "warning",
    "Router replay on a model without experts.",
    """Router replay records and replays the experts each token was routed to (verl docs: Router Replay,
    R2/R3); a dense model has no router, so there is nothing to replay and R3 asks the engine for routes it
    cannot produce.""",
    "set training.router_replay: disabled for a dense model",
    examples=Examples(
        bad=fragment(MEGATRON_FP8, {"training": {"router_replay": "R2"}}),
        good=fragment(MOE, MEGATRON_FP8, {"training": {"router_replay": "R2"}}),
        message="has no experts",
    ),
)
def replay_dense(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.training.router_replay != "disabled" and not ctx.known_model.is_moe:
        yield Finding(
            f"{ctx.known_model.id} has no experts; training.router_replay {ctx.spec.training.router_replay} "
            "does nothing",
            "training.router_replay",
        )


@rule(
    "MOE003",
    "moe-fp8-rollout-uncorrected",
    "warning",
    "An MoE model rolls out in FP8 with neither R3 router replay nor truncated IS.",
    """FP8 rollouts shift the router's inputs, so the engine picks other experts than the trainer for some
    tokens; in MoE models this routing mismatch dominates the rollout/trainer gap (Rollout Routing Replay,
    arXiv:2510.11370, replays the engine's routes in training to remove it). The FP8-RL paper trained its
    MoE run (Qwen3-30B-A3B) with token-level TIS, C=2. verl 0.9.1 supports R3 with the pinned engines
    (vllm/sglang profiles: capability.return_routed_experts).""",
    "set correction.method: tis, or training.router_replay: R3 (Megatron), or acknowledge MOE003",
    acknowledgeable=True,
    examples=Examples(
        bad=fragment(MOE, {"correction": {"method": "mask", "bounds": [0.5, 2.0]}}),
        good=fragment(MOE, {"correction": {"method": "tis"}}),
        message="routing mismatch goes uncorrected",
    ),
)
def moe_fp8_uncorrected(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if (
        ctx.known_model.is_moe
        and spec.fp8_rollout
        and spec.training.router_replay != "R3"
        and spec.correction.method not in ("tis", "seq_tis")
    ):
        yield Finding(
            f"{ctx.known_model.id} rolls out in FP8 with correction.method {spec.correction.method!r} and "
            f"router_replay {spec.training.router_replay}: routing mismatch goes uncorrected",
            "correction.method",
        )
