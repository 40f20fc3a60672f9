"""A validated spec (retargeted to a --backend choice) turned into a SettingsPlan: every setting, with provenance."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fp8spec.compiler.adapters.engine import engine_adapter
from fp8spec.compiler.adapters.runtime import build_runtime
from fp8spec.compiler.adapters.verl import build_verl
from fp8spec.compiler.adapters.verl_run import build_batching, build_reward, build_run
from fp8spec.compiler.settings import SettingsPlan
from fp8spec.engines import engine_names
from fp8spec.resolve.valid import ValidSpec
from fp8spec.rules.runner import Validation, validate_path
from fp8spec.targets import BACKENDS, ENGINES, TRAINERS  # noqa: F401 - re-exported
from fp8spec.trainers import get_trainer


class BackendChoiceError(Exception):
    """--backend is unknown (exit code 2)."""


@dataclass(frozen=True)
class BackendChoice:
    trainer: Optional[str]  # None for a standalone serve bundle
    engine: str

    @property
    def name(self) -> str:
        return f"{self.trainer}+{self.engine}" if self.trainer else self.engine


def parse_backend(text: str) -> BackendChoice:
    text = text.strip().lower()
    if text not in BACKENDS:
        raise BackendChoiceError(f"unknown backend {text!r}; choose one of {', '.join(BACKENDS)}")
    trainer, _, engine = text.rpartition("+")
    return BackendChoice(trainer or None, engine)


def retarget_fields(choice: BackendChoice) -> dict[str, str]:
    """The spec fields a backend choice sets: a serve bundle keeps the spec's trainer."""
    fields = {"rollout.engine": choice.engine}
    if choice.trainer:
        fields["training.backend"] = choice.trainer
    return fields


def validate_for(
    path: str | Path, display: Optional[str], backend: Optional[str], gpu: Optional[str] = None
) -> tuple[Validation, BackendChoice]:
    """Validate a spec for a backend: without one, the spec's own; with one, the spec retargeted to it (every
    rule checks the spec as if training.backend / rollout.engine said so); ``gpu`` likewise for hardware.gpu.
    Raises BackendChoiceError, InputError."""
    extra = {"hardware.gpu": gpu} if gpu is not None else {}
    if backend is None:
        validation = validate_path(path, display, extra or None)
        spec = validation.loaded.spec
        if spec is None:
            return validation, BackendChoice(None, engine_names()[0])
        return validation, BackendChoice(spec.training.backend, spec.rollout.engine)
    choice = parse_backend(backend)
    return validate_path(path, display, {**retarget_fields(choice), **extra}), choice


def retarget_note(validation: Validation, choice: BackendChoice) -> str:
    """One line saying how the spec was retargeted, or '' when it was compiled for its own backend."""
    if not validation.retargeted:
        return ""
    changes = "; ".join(
        f"{r.field} {r.spec_value}{'' if r.written else ' (its default)'} -> {r.value}"
        for r in validation.retargeted
    )
    moved = validation.spec_backend != choice.name
    head = f"retargeted from {validation.spec_backend} to {choice.name}" if moved else "retargeted"
    return f"{head} ({changes}): every rule checked the spec as if it said so"


def choose_backend(text: Optional[str], validation: Validation) -> BackendChoice:
    """The backend of an already validated spec: its own, or ``text`` when the validation was retargeted to it
    (validate_for). A choice the validated spec does not say is a caller's mistake."""
    spec = validation.loaded.spec
    assert spec is not None  # only asked of a spec that was read
    if text is None:
        return BackendChoice(spec.training.backend, spec.rollout.engine)
    choice = parse_backend(text)
    for field, value in retarget_fields(choice).items():
        section, name = field.split(".")
        have = getattr(getattr(spec, section), name)
        if have != value:
            raise BackendChoiceError(
                f"--backend {choice.name}: the spec was validated with {field} {have}; "
                "validate it for the backend first"
            )
    return choice


def build_settings_plan(ctx: ValidSpec, choice: BackendChoice) -> SettingsPlan:
    """Every setting of the bundle for ``choice``, from the valid spec (retargeted to it: validate_for)."""
    plan = SettingsPlan(backend=choice.name)
    engine = engine_adapter(ctx.engine.name)  # the choice's: the spec was validated retargeted to it
    if choice.trainer is None:
        plan.entrypoint = engine.build_serve(plan, ctx)
        return plan
    keys = build_verl(plan, ctx, choice.trainer, choice.engine)
    build_batching(plan, keys, ctx)
    build_run(plan, keys, ctx)
    build_reward(plan, keys, ctx)
    adapter = get_trainer(choice.trainer).settings_adapter
    if adapter:
        module, _, function = adapter.partition(":")
        getattr(importlib.import_module(module), function)(plan, ctx, keys)
    engine.build_in_verl(plan, ctx, keys)
    build_runtime(plan, ctx, keys)
    # Environment variables must reach every Ray worker. Inside a Ray job the job's runtime_env carries them
    # (runtime_env.yaml); Ray refuses the same key again in ray.init's runtime_env (ray/_private/worker.py), so
    # these ray.init overrides are passed by launch.sh only outside a Ray job (verl merges
    # ray_kwargs.ray_init.runtime_env over its defaults, main_ppo.py).
    plan.working_dir_key = keys.key("key.ray_runtime_env_working_dir")
    env_key = keys.key("key.ray_runtime_env_env_vars")
    for s in plan.of("env"):
        key = f"{env_key}.{s.key}"
        plan.add(
            "ray_init",
            key,
            str(s.value),
            s.source,
            f"{s.key} in every Ray worker (launch.sh by hand)",
            keys.evidence("key.ray_runtime_env_env_vars"),
            keys.needs_plus(key),
        )
    return plan
