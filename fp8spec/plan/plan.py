"""One spec's plan: the rollout engine for each FP8 choice, the trainer, what FP8 buys, and the verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional
from weakref import WeakKeyDictionary

from fp8spec.plan.engine_memory import memory_model
from fp8spec.plan.gain import Gain, TrainerGain, expected_gain, trainer_gain, trainer_gain_unmeasured
from fp8spec.plan.rollout import RolloutResult, memory_facts, rollout_plan
from fp8spec.plan.setup import EngineSetup, Overrides, setup_from_spec
from fp8spec.plan.trainer import TrainerMemory, trainer_precisions
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.sync import SyncTime
    from fp8spec.plan.verdict import LayoutError, PlanRules, Verdict
    from fp8spec.resolve.context import ResolvedSpec
    from fp8spec.specfile.model import Spec


@dataclass
class MemoryPlan:
    spec: Spec
    model: ModelFacts
    setup: EngineSetup
    rollout: list[RolloutResult]
    trainer: Optional[TrainerMemory]
    notes: list[str] = field(default_factory=list)
    trainer_other: Optional[TrainerMemory] = None  # the Megatron trainer in the other precision
    # the validated spec the plan is of: its fix lines are checked against every rule, as hints are
    ctx: Optional[ResolvedSpec] = field(default=None, repr=False, compare=False)
    # choice key -> codes of the rules that refuse that column (fp8spec.rules.plan_columns; None: not judged)
    refused: Optional[dict[str, tuple[str, ...]]] = None
    # errors the rules report for the layout the plan was asked about (--tp/--ep), not for the spec itself
    layout_errors: tuple[LayoutError, ...] = ()
    # the rules' names and checked fixes for its verdicts, which its text and JSON print (None: not judged)
    rules: Optional[PlanRules] = field(default=None, repr=False, compare=False)

    @property
    def total_bytes(self) -> int:
        return self.setup.total_bytes

    @property
    def gpu(self) -> str:
        return self.setup.gpu

    @property
    def gpu_arch(self) -> str:
        """The target GPU's generation (hopper, blackwell, ...): what the measured figures are scoped by."""
        from fp8spec.hardware import gpu

        return gpu(self.spec.hardware.gpu).arch

    @property
    def world(self) -> int:
        return self.spec.world_size

    @property
    def gpus_per_node(self) -> int:
        return self.spec.hardware.gpus_per_node

    @property
    def replicas(self) -> int:
        return max(1, self.world // self.setup.gpus_per_replica)

    @property
    def spec_rollout(self) -> RolloutResult:
        return next(r for r in self.rollout if r.is_spec)

    @property
    def bf16_rollout(self) -> Optional[RolloutResult]:
        return next((r for r in self.rollout if r.choice.key == "bf16"), None)

    @property
    def host_ram_per_node(self) -> Optional[int]:
        """Host RAM the trainer's offloaded state takes on one node (the busiest GPU's share x GPUs per node;
        an upper bound where pipeline stages differ); None without offload."""
        if self.trainer is None or not self.trainer.host_offload:
            return None
        return self.trainer.host_offload * self.gpus_per_node

    def gain(self, r: RolloutResult) -> Optional[Gain]:
        """The measured speed-up of this column over BF16 for this engine and model class; None when nothing
        covers them, for the BF16 column itself, and for a column the rules refuse."""
        if r.choice.key == "bf16" or self.refusal(r):
            return None
        return expected_gain(
            self.setup.engine,
            self.model.architecture,
            r.choice.quantized is not None,
            r.choice.kv_dtype != "bf16",
        )

    def refusal(self, r: RolloutResult) -> tuple[str, ...]:
        return (self.refused or {}).get(r.choice.key, ())

    def gain_text(self, r: RolloutResult) -> str:
        """The expected-gain cell: a measured range, 'refused (CODE)', 'not measured', or '-' for BF16."""
        if r.choice.key == "bf16":
            return "-"
        if self.refusal(r):
            return f"refused ({', '.join(self.refusal(r))})"
        g = self.gain(r)
        if g is None:
            return "not measured"
        return f"{g.low:.0%}" if g.low == g.high else f"{g.low:.0%}-{g.high:.0%}"

    def trainer_gain(self) -> Optional[TrainerGain]:
        """Measured FP8 layer speed for a Megatron trainer that can train in FP8 (None for FSDP or unmeasured)."""
        if not get_trainer(self.spec.training.backend).fp8_training:
            return None
        tokens = self.spec.rollout.max_prompt_length + self.spec.rollout.max_response_length
        return trainer_gain(self.model, self.gpu_arch, self.spec.training.fp8_scaling, tokens)

    def trainer_gain_unmeasured(self) -> str:
        """Why a Megatron trainer has no measured FP8 layer figure ('' when it has one or is not Megatron)."""
        if not get_trainer(self.spec.training.backend).fp8_training:
            return ""
        return trainer_gain_unmeasured(self.model, self.gpu_arch, self.spec.training.fp8_scaling)

    def weight_sync(self) -> SyncTime:
        """The time of one weight sync after the first, from the measured syncs; or why there is none."""
        from fp8spec.plan.sync import sync_time

        return sync_time(self)

    def layouts_text(self) -> str:
        """The measured trainer speed per training layout and the advice for training.priority ('' for a trainer
        without FP8 training, a BF16 spec, or an unmeasured model class)."""
        from fp8spec.plan.precision_layout import layout_speeds, layouts_text

        if self.ctx is None or not get_trainer(self.spec.training.backend).fp8_training:
            return ""
        if self.spec.training.precision != "fp8":
            return ""
        return layouts_text(self.ctx, layout_speeds(self.model, self.gpu_arch))

    def layout_mismatch(self) -> str:
        """The module classes trained in another precision than the rollout runs them ('' for none)."""
        from fp8spec.plan.precision_layout import class_mismatches, mismatch_text

        return "" if self.ctx is None else mismatch_text(class_mismatches(self.ctx))

    def headroom(self, trainer: TrainerMemory) -> int:
        """GPU memory left while the engine runs next to the trainer's resident state (both processes' memory
        beyond their state and share counted, as measured); negative: the engine cannot start or wake (MEM003)."""
        from fp8spec.plan.facts import engine_beyond_share

        return (
            self.total_bytes
            - trainer.resident_during_rollout
            - engine_beyond_share(self.setup.engine)
            - self.spec_rollout.memory.requested
        )

    def verdicts(self) -> list[Verdict]:
        from fp8spec.plan.feasibility import verdicts

        return verdicts(self)

    def failing(self) -> list[Verdict]:
        """The verdicts that fail, one per problem: MEM005 gives way to MEM006 (the same peak, an error), MEM007
        to MEM003 (a trainer that does not fit beside the engine has no room for the bucket either)."""
        bad = [v for v in self.verdicts() if not v.ok]
        codes = {v.code for v in bad}
        yields = {"MEM005": "MEM006", "MEM007": "MEM003"}
        return [v for v in bad if yields.get(v.code) not in codes]

    def response_lengths(self) -> list[int]:
        """Response lengths the concurrency curves are drawn at (powers of two, plus the spec's own)."""
        prompt = self.spec.rollout.max_prompt_length
        top = max(self.setup.max_model_len - prompt, 1)
        points, n = [], 256
        while n < top:
            points.append(n)
            n *= 2
        points += [top, min(self.spec.rollout.max_response_length, top)]
        return sorted(set(points))


def build_memory_plan(ctx: ResolvedSpec, overrides: Overrides = Overrides()) -> MemoryPlan:
    """The plan of a validated context (model resolved). Raises PlanInputError for unusable inputs."""
    setup = setup_from_spec(ctx, overrides)
    notes = memory_model(setup.engine).memory_notes(setup, memory_facts(setup))
    if overrides.gpu_memory_gib is None:
        where = (
            "hardware.gpu_memory_gib"
            if ctx.spec.hardware.gpu_memory_gib is not None
            else "fp8spec/data/gpu_memory.yaml"
        )
        notes.append(f"{setup.gpu}: {setup.total_bytes:,} bytes per GPU as CUDA reports them ({where})")
    trainers = trainer_precisions(ctx)
    other = trainers[1] if len(trainers) > 1 else None
    return MemoryPlan(
        ctx.spec, ctx.known_model, setup, rollout_plan(ctx, setup), trainers[0], notes, other, ctx
    )


@dataclass(frozen=True)
class Curve:
    label: str
    is_spec: bool
    capacity_tokens: int
    points: tuple[tuple[int, float], ...]  # (response length, sequences that fit at prompt + response)


def curves(plan: MemoryPlan) -> tuple[list[Curve], int]:
    """The picture's data: per choice, KV capacity and max concurrency against response length; and the
    sequences the engine runs at once (the demand line)."""
    prompt = plan.spec.rollout.max_prompt_length
    lengths = plan.response_lengths()
    out = [
        Curve(
            r.choice.label,
            r.is_spec,
            r.kv.tokens,
            tuple((n, round(r.kv.concurrency_at(prompt + n), 4)) for n in lengths),
        )
        for r in plan.rollout
    ]
    return out, plan.spec_rollout.running


def response_ticks(lengths: list[int], min_gap: float = 0.6) -> list[tuple[int, str]]:
    """(length, label) ticks for the log2 response-length axis: powers of two first, then the other lengths
    where they sit at least ``min_gap`` octaves from every kept tick (so labels never overlap); labels carry no
    thousands separator: 1024 multiples as '16K' (K = 1024 tokens), others in full digits."""
    import math

    ordered = sorted(set(lengths), key=lambda n: (n & (n - 1) != 0, n))  # powers of two first
    kept: list[int] = []
    for n in ordered:
        if all(abs(math.log2(n) - math.log2(k)) >= min_gap for k in kept):
            kept.append(n)
    return [(n, f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)) for n in sorted(kept)]


DOES_NOT_FIT = "does not fit"


def plan_problem(ctx: ResolvedSpec) -> Optional[str]:
    """Why the spec's plan cannot be made (the memory rules then do not run), or None when it can."""
    from fp8spec.plan.setup import PlanInputError

    if spec_memory_plan(ctx) is not None:
        return None
    if ctx.model is None:
        return "the model is not resolved (REF001)"
    if ctx.profile("verl") is None:
        return f"verl {ctx.spec.stack.verl} has no backend profile (REF002)"
    try:
        build_memory_plan(ctx)
    except PlanInputError as err:
        return str(err)
    return None


# resolved spec -> its plan with verl's defaults: made once, by the first MEM rule that reads it, and reused by the
# other MEM rules and the compiler; a resolved spec compares by identity, and its plan goes when it does
_SPEC_PLANS: WeakKeyDictionary[ResolvedSpec, Optional[MemoryPlan]] = WeakKeyDictionary()


def spec_memory_plan(ctx: ResolvedSpec) -> Optional[MemoryPlan]:
    """The spec's memory plan with verl's defaults, shared by the MEM rules and the compiler; None when the
    inputs are not enough (unknown GPU memory, unresolved model): `fp8spec plan` says why."""
    if ctx not in _SPEC_PLANS:
        _SPEC_PLANS[ctx] = plan_or_none(ctx)
    return _SPEC_PLANS[ctx]


def plan_or_none(ctx: ResolvedSpec) -> Optional[MemoryPlan]:
    """The spec's plan with verl's defaults, made anew (spec_memory_plan keeps it); None when the inputs are not
    enough (unknown GPU memory, unresolved model): `fp8spec plan` says why."""
    from fp8spec.plan.setup import PlanInputError

    if ctx.model is None or ctx.profile("verl") is None:
        return None
    try:
        return build_memory_plan(ctx)
    except PlanInputError:
        return None
