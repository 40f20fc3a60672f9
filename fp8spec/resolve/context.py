"""The resolved spec: the typed spec with the model's facts, the loaded backend profiles and the target GPU.

Rules read it (findings may come from what could not be resolved: an unknown model, a missing profile); the
planner reads it; the compiler gets a ``ValidSpec`` (fp8spec.resolve.valid), its non-optional form once
the spec has no errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from fp8spec.engines import get_engine
from fp8spec.hardware import Gpu, gpu
from fp8spec.specfile.model import Spec
from fp8spec.targets import STACK_KINDS
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.engines.base import Engine
    from fp8spec.exclusions import ExclusionPlan
    from fp8spec.profiles import Profile
    from fp8spec.resolve.batching import Batching
    from fp8spec.resolve.reward import RewardFile, RewardFileProblem
    from fp8spec.trainers.base import Trainer
    from fp8spec.trainers.megatron.layout import MegatronLayout


@dataclass(eq=False)
class ResolvedSpec:
    """What rules, planner and compiler read: resolved facts as fields, derived views as cached properties
    (each computed once, on first use). Nothing here knows about proposals (fp8spec.rules.proposals)."""

    spec: Spec
    spec_dir: Path
    model: Optional[ModelFacts] = None  # None when it could not be resolved (model_error says why)
    model_error: Optional[str] = None
    model_error_path: str = "model.name"
    profiles: dict[str, Profile] = field(default_factory=dict)  # kind -> profile of the pinned version
    missing_profiles: dict[str, str] = field(default_factory=dict)  # stack field -> message
    reward_file: Optional[RewardFile] = None  # when the spec names one and it is usable
    reward_problem: Optional[RewardFileProblem] = None  # when the spec names one that is not

    @property
    def known_model(self) -> ModelFacts:
        """The model's facts where the model is resolved by construction: in a rule that needs a model (the
        runner runs it only then) and in the planner (built only then)."""
        if self.model is None:
            raise LookupError(f"the model is not resolved: {self.model_error}")
        return self.model

    @property
    def gpu(self) -> Gpu:
        return gpu(self.spec.hardware.gpu)

    def profile(self, kind: str) -> Profile | None:
        return self.profiles.get(kind)

    def fact(self, kind: str, fact_id: str, default: Any = None) -> Any:
        """A backend fact of the spec's pinned version, or ``default`` if the profile or fact is absent."""
        prof = self.profiles.get(kind)
        if prof is None or not prof.has(fact_id):
            return default
        return prof.value(fact_id)

    @property
    def engine(self) -> Engine:
        """The rollout engine (fp8spec.engines): rules and the planner ask it, never compare its name."""
        return get_engine(self.spec.rollout.engine)

    @property
    def trainer(self) -> Trainer:
        """verl's trainer (fp8spec.trainers): rules and the planner ask it, never compare its name."""
        return get_trainer(self.spec.training.backend)

    @property
    def engine_version(self) -> str:
        return getattr(self.spec.stack, self.engine.name)

    def native_kv_calibration(self) -> bool:
        """Whether the pinned stack itself realises kv_cache.recalibrate (no runtime patch needed)."""
        recal = self.spec.kv_cache.recalibrate
        if recal == "once":
            # A mapping ({exists: false, ...} in vLLM 0.33.0) is truthy whatever it says: read its fields.
            # vLLM 0.24's calculate_kv_scales exists but calibrates on the profiling dummy run (measured on an
            # H200): usable_for_rl false, so 'once' is realised by the kv_scales patch instead.
            cap = self.fact(self.engine.name, "capability.calculate_kv_scales", False)
            if isinstance(cap, dict):
                return bool(cap.get("exists", False) and cap.get("usable_for_rl", True))
            return bool(cap)
        if recal == "per_step":
            return bool(self.fact("verl", "capability.kv_scale_recalibration", False))
        return True

    @cached_property
    def megatron(self) -> MegatronLayout:
        """The Megatron layout with its resolved defaults (fp8spec.trainers.megatron.layout.MegatronLayout)."""
        from fp8spec.trainers.megatron.layout import megatron_layout

        return megatron_layout(self.spec, self.model)

    @cached_property
    def batching(self) -> Batching:
        """Micro-batch sizes and token budgets with their resolved defaults (fp8spec.resolve.batching)."""
        from fp8spec.resolve.batching import batching

        return batching(self.spec)

    @cached_property
    def exclusions(self) -> ExclusionPlan:
        from fp8spec.exclusions import resolve_exclusions

        return resolve_exclusions(self.spec, self.model)

    def kuberay_image(self) -> str | None:
        """The pods' image: the spec's, else verl's published image for the pinned engine version."""
        image = self.spec.cluster.kuberay.image
        if image:
            return image
        return (self.fact("verl", "images.kuberay") or {}).get(f"{self.engine.name}=={self.engine_version}")


def build_context(spec: Spec, spec_dir: Path) -> ResolvedSpec:
    from fp8spec.resolve.reward import load_reward_file

    ctx = ResolvedSpec(spec=spec, spec_dir=spec_dir)
    _resolve_model(ctx)
    _resolve_profiles(ctx)
    ctx.reward_file, ctx.reward_problem = load_reward_file(spec, spec_dir)
    return ctx


def derived_context(ctx: ResolvedSpec, spec: Spec) -> ResolvedSpec:
    """The context of ``spec``, a variant of ``ctx.spec`` with the same model and reward file (a proposal's
    probe: fp8spec.rules.proposals)."""
    new = ResolvedSpec(
        spec=spec,
        spec_dir=ctx.spec_dir,
        model=ctx.model,
        model_error=ctx.model_error,
        model_error_path=ctx.model_error_path,
        reward_file=ctx.reward_file,
        reward_problem=ctx.reward_problem,
    )
    _resolve_profiles(new)
    return new


def _resolve_model(ctx: ResolvedSpec) -> None:
    from fp8spec.catalog import CatalogError, get_model, model_from_config
    from fp8spec.specfile.paths import PathError, local_path

    section = ctx.spec.model
    try:
        if section.config_path:
            ctx.model_error_path = "model.config_path"
            ctx.model = model_from_config(local_path(section.config_path, ctx.spec_dir))
        else:
            ctx.model = get_model(section.name)
    except (CatalogError, PathError) as err:
        ctx.model_error = str(err)


def _resolve_profiles(ctx: ResolvedSpec) -> None:
    from fp8spec.profiles import ProfileNotFound, load_profile

    for stack_field in used_stack_fields(ctx.spec):
        kind = STACK_KINDS[stack_field]
        version = getattr(ctx.spec.stack, stack_field)
        try:
            ctx.profiles[kind] = load_profile(kind, version)
        except ProfileNotFound as err:
            ctx.missing_profiles[stack_field] = str(err)


def used_stack_fields(spec: Spec) -> list[str]:
    """The packages a run of this spec uses: verl, its rollout engine, and Megatron/TE for the Megatron trainer."""
    return ["verl", spec.rollout.engine, *get_trainer(spec.training.backend).stack_fields]
