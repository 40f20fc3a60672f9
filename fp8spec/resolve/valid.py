"""A spec without errors, resolved: what the compiler receives. Nothing in it is optional.

The rules may run on a spec whose model is unknown or whose profiles are missing (that is what they report);
the compiler may not. ``ValidSpec`` is made only from a validation without errors
(``fp8spec.rules.runner.Validation.valid``), and checks on the way what that promises: the model's facts are
known and every package the run uses has a profile. So the compiler reads ``valid.model`` and
``valid.profile(kind)`` without checking for None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fp8spec.diagnostics import Diagnostic
from fp8spec.resolve.context import ResolvedSpec, used_stack_fields
from fp8spec.specfile.model import Spec
from fp8spec.targets import STACK_KINDS

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.engines.base import Engine
    from fp8spec.exclusions import ExclusionPlan
    from fp8spec.profiles import Profile
    from fp8spec.resolve.batching import Batching
    from fp8spec.resolve.reward import RewardFile
    from fp8spec.trainers.megatron.layout import MegatronLayout


class NotValid(Exception):
    """A ValidSpec was asked for a spec that has errors or could not be resolved (a caller's mistake: exit 3)."""


@dataclass(frozen=True)
class Retarget:
    """One field a --backend choice changed: the spec's value (written, or its default) and the target's."""

    field: str
    spec_value: str
    value: str
    written: bool


def spec_backend(spec: Spec, retargeted: tuple[Retarget, ...]) -> str:
    """The backend ``spec`` named before ``retargeted`` changed it: 'training.backend+rollout.engine'."""
    values = {"training.backend": spec.training.backend, "rollout.engine": spec.rollout.engine}
    for r in retargeted:
        if r.field in values:  # not hardware.gpu (plan --gpu)
            values[r.field] = r.spec_value
    return f"{values['training.backend']}+{values['rollout.engine']}"


@dataclass(frozen=True)
class ValidSpec:
    resolved: ResolvedSpec
    sha256: str  # of the spec file as read
    retargeted: tuple[Retarget, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()  # warnings and acknowledged findings (no errors)
    source_text: str = ""  # the spec file as read (its sha256 is ``sha256``)

    def __post_init__(self) -> None:
        if any(d.severity == "error" for d in self.diagnostics):
            raise NotValid("the spec has errors")
        if self.resolved.model is None:
            raise NotValid(f"the model's facts are unknown: {self.resolved.model_error}")
        missing = [
            STACK_KINDS[f]
            for f in used_stack_fields(self.spec)
            if self.resolved.profile(STACK_KINDS[f]) is None
        ]
        if missing:
            raise NotValid(f"no profile for {', '.join(missing)}")

    # ---------------------------------------------------------------------------------- the spec and its facts
    @property
    def spec(self) -> Spec:
        return self.resolved.spec

    @property
    def model(self) -> ModelFacts:
        model = self.resolved.model
        assert model is not None  # checked in __post_init__
        return model

    def profile(self, kind: str) -> Profile:
        """The profile of a package the run uses (KeyError for one it does not use)."""
        prof = self.resolved.profile(kind)
        if prof is None:
            raise KeyError(f"the run does not use {kind}")
        return prof

    def fact(self, kind: str, fact_id: str, default: Any = None) -> Any:
        return self.resolved.fact(kind, fact_id, default)

    @property
    def engine(self) -> Engine:
        return self.resolved.engine

    @property
    def engine_version(self) -> str:
        return self.resolved.engine_version

    @property
    def megatron(self) -> MegatronLayout:
        return self.resolved.megatron

    @property
    def batching(self) -> Batching:
        return self.resolved.batching

    @property
    def exclusions(self) -> ExclusionPlan:
        return self.resolved.exclusions

    @property
    def reward_file(self) -> RewardFile | None:
        """The custom reward file, or None when the spec names none (a named but unusable one is an error)."""
        return self.resolved.reward_file

    def native_kv_calibration(self) -> bool:
        return self.resolved.native_kv_calibration()

    def kuberay_image(self) -> str | None:
        return self.resolved.kuberay_image()

    def used_stack(self) -> dict[str, str]:
        """Stack field -> pinned version, for the packages the run uses (verl, its engine, Megatron/TE)."""
        return {f: getattr(self.spec.stack, f) for f in used_stack_fields(self.spec)}

    # ---------------------------------------------------------------------------------- retargeting
    @property
    def spec_backend(self) -> str:
        """The backend the spec file itself names (before any retargeting)."""
        return spec_backend(self.spec, self.retargeted)
