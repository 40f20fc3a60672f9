"""What the run was compiled and planned to do: the patches a bundle lists (its preflight.json) and what
`fp8spec plan` predicts for the spec (KV capacity, expected rollout speed-up, weight-sync time), from the plan
layer itself."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from fp8spec.bounded_read import ReadError, read_regular


class ExpectError(Exception):
    """The bundle or the spec cannot be read; the message is located and for users."""


@dataclass(frozen=True)
class BundleFacts:
    where: str  # the preflight.json the facts come from
    patches: tuple[str, ...]
    backend: str
    spec_name: str

    @property
    def sync_path(self) -> str:
        """The weight-sync path the bundle compiled: the direct path, fp8spec's block quantizer, or verl's own."""
        for path in ("direct_sync", "fast_block_quant"):
            if path in self.patches:
                return path
        return "verl"


@dataclass(frozen=True)
class PlanFacts:
    spec: str
    kv_cache_tokens: int
    choice: str  # the plan's label of the spec's rollout choice
    gain_low: Optional[float] = None  # expected rollout speed-up over BF16 (0.39 = +39 %)
    gain_high: Optional[float] = None
    gain_source: str = ""
    notes: list[str] = field(default_factory=list)
    sync_s: Optional[float] = None  # one weight sync after the first, as fp8spec plan predicts it
    sync_path: str = ""  # the plan's label of the spec's sync path
    sync_why: str = ""  # why the plan has no sync time
    trainer_fp8: bool = False  # the spec's trainer computes in FP8 (else its passes match a BF16 run's)
    gain_caveat: str = ""  # why the expected gain may not hold for this spec (the BF16 engine holds the step)
    update_budget: int = 0  # tokens of the spec's longest update micro-batch
    packing_budget: int = (
        0  # the largest packed update budget the plan fits (0: none, or packing costs attention)
    )


def read_bundle(folder: Path) -> BundleFacts:
    path = folder / "preflight.json"
    where = str(path)
    if not folder.is_dir():
        raise ExpectError(f"{folder}: --bundle takes the bundle folder fp8spec compile wrote (not found)")
    try:
        data = json.loads(read_regular(path, 4 << 20, "preflight.json").decode("utf-8"))
    except ReadError as err:
        raise ExpectError(f"{where}: {err} (is {folder} a bundle fp8spec compile wrote?)") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise ExpectError(f"{where}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise ExpectError(f"{where}: not a bundle's preflight.json (no mapping)")
    runtime = data.get("runtime") if isinstance(data.get("runtime"), dict) else {}
    patches = runtime.get("patches") if isinstance(runtime, dict) else None
    if patches is None:
        env = data.get("env") if isinstance(data.get("env"), dict) else {}
        text = env.get("FP8SPEC_RUNTIME_PATCHES", "") if isinstance(env, dict) else ""
        patches = [p for p in str(text).split(",") if p]
    if not isinstance(patches, list) or not all(isinstance(p, str) for p in patches):
        raise ExpectError(f"{where}: runtime.patches is not a list of patch names")
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    return BundleFacts(
        where, tuple(sorted(patches)), str(data.get("backend", "")), str((spec or {}).get("name", ""))
    )


def plan_for(spec: Path) -> PlanFacts:
    """`fp8spec plan`'s prediction for ``spec``'s own rollout choice. A spec with rule errors still gets its plan
    (as `fp8spec plan` prints it); one without a model or verl profile has none."""
    from fp8spec.plan import PlanInputError, build_memory_plan
    from fp8spec.plan.gain import capacity_note
    from fp8spec.plan.packing import packing_room
    from fp8spec.plan.precision_layout import fp8_trained
    from fp8spec.rules.runner import validate_path
    from fp8spec.specfile.loader import InputError

    try:
        validation = validate_path(spec, str(spec))
    except InputError as err:
        raise ExpectError(err.diagnostic.render()) from None
    ctx = validation.context
    if ctx is None or ctx.model is None or ctx.profile("verl") is None:
        first = next((d.render() for d in validation.diagnostics if d.severity == "error"), "")
        raise ExpectError(f"{spec}: no plan without a valid spec, model and verl profile {first}".rstrip())
    try:
        plan = build_memory_plan(ctx)
    except PlanInputError as err:
        raise ExpectError(f"{spec}: {err}") from None
    chosen = plan.spec_rollout
    gain = plan.gain(chosen)
    sync = plan.weight_sync()
    notes = [
        f"the spec has rule errors ({len(validation.errors)}); the plan is the one fp8spec plan prints"
    ] * bool(validation.errors)
    room = packing_room(plan)
    return PlanFacts(
        spec=str(spec),
        kv_cache_tokens=chosen.kv.tokens,
        choice=chosen.choice.label,
        gain_low=gain.low if gain else None,
        gain_high=gain.high if gain else None,
        gain_source=gain.source if gain else "",
        notes=notes,
        sync_s=sync.seconds,
        sync_path=sync.label,
        sync_why=sync.why,
        trainer_fp8=fp8_trained(ctx.spec),
        gain_caveat=note.short() if gain and (note := capacity_note(plan.bf16_rollout)) else "",
        update_budget=plan.trainer.micro_batch_tokens if plan.trainer else 0,
        packing_budget=room.tokens if room else 0,
    )
