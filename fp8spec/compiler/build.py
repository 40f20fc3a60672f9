"""Turn a validated spec and a --backend choice into a Plan (every setting of every layer, with provenance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fp8spec.compiler.adapters.megatron import build_megatron
from fp8spec.compiler.adapters.runtime import build_runtime
from fp8spec.compiler.adapters.sglang import build_sglang_in_verl, build_sglang_serve
from fp8spec.compiler.adapters.verl import build_verl
from fp8spec.compiler.adapters.verl_run import build_batching, build_reward, build_run
from fp8spec.compiler.adapters.vllm import build_vllm_in_verl, build_vllm_serve
from fp8spec.compiler.plan import Plan
from fp8spec.rules.engine import Validation

TRAINERS = ("fsdp", "megatron")
ENGINES = ("vllm", "sglang")
BACKENDS = tuple(f"{t}+{e}" for t in TRAINERS for e in ENGINES) + ENGINES


class BackendChoiceError(Exception):
    """--backend is unknown or contradicts the spec (exit code 2)."""


@dataclass(frozen=True)
class BackendChoice:
    trainer: Optional[str]  # None for a standalone serve bundle
    engine: str

    @property
    def name(self) -> str:
        return f"{self.trainer}+{self.engine}" if self.trainer else self.engine


def choose_backend(text: Optional[str], validation: Validation) -> BackendChoice:
    spec = validation.loaded.spec
    if text is None:
        return BackendChoice(spec.training.backend, spec.rollout.engine)
    text = text.strip().lower()
    if text not in BACKENDS:
        raise BackendChoiceError(f"unknown backend {text!r}; choose one of {', '.join(BACKENDS)}")
    trainer, _, engine = text.rpartition("+")
    choice = BackendChoice(trainer or None, engine)
    positions = validation.loaded.positions
    for field, wanted, have in (("rollout.engine", choice.engine, spec.rollout.engine),
                                ("training.backend", choice.trainer, spec.training.backend)):
        if wanted is not None and wanted != have:
            written = positions.has(tuple(field.split(".")))
            where = "" if written else " (its default)"
            raise BackendChoiceError(
                f"--backend {text} contradicts the spec: {field} is {have}{where}; "
                f"set {field}: {wanted} in the spec or pick a backend with {have}"
            )
    return choice


def build_plan(validation: Validation, choice: BackendChoice) -> Plan:
    ctx = validation.context
    plan = Plan(backend=choice.name)
    if choice.trainer is None:
        plan.entrypoint = (build_vllm_serve if choice.engine == "vllm" else build_sglang_serve)(plan, ctx)
        return plan
    keys = build_verl(plan, ctx, choice.trainer, choice.engine)
    build_batching(plan, keys, ctx)
    build_run(plan, keys, ctx)
    build_reward(plan, keys, ctx)
    if choice.trainer == "megatron":
        build_megatron(plan, ctx, keys)
    (build_vllm_in_verl if choice.engine == "vllm" else build_sglang_in_verl)(plan, ctx, keys)
    build_runtime(plan, ctx, choice.engine, keys)
    # Environment variables must reach every Ray worker. Inside a Ray job the job's runtime_env carries them
    # (runtime_env.yaml); Ray refuses the same key again in ray.init's runtime_env (ray/_private/worker.py), so
    # these ray.init overrides are passed by launch.sh only outside a Ray job (verl merges
    # ray_kwargs.ray_init.runtime_env over its defaults, main_ppo.py).
    env_key = keys.key("key.ray_runtime_env_env_vars")
    for s in plan.of("env"):
        key = f"{env_key}.{s.key}"
        plan.add("ray_init", key, str(s.value), s.source, f"{s.key} in every Ray worker (launch.sh by hand)",
                 keys.evidence("key.ray_runtime_env_env_vars"), keys.needs_plus(key))
    return plan
