"""The compiled plan: every setting fp8spec emits, in every layer, with the spec field it came from and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional

from fp8spec.quoting import hydra_override

if TYPE_CHECKING:
    from fp8spec.profiles import Profile

# ray_init: Hydra overrides launch.sh passes only outside a Ray job (run by hand on a Ray head), where verl's
# own ray.init must carry the bundle's runtime environment to the workers; inside a job the job carries it.
Layer = Literal["hydra", "ray_init", "env", "engine_arg", "patch"]


@dataclass(frozen=True)
class Setting:
    layer: Layer
    key: str  # Hydra key (hydra, ray_init), env var name, engine flag, or patch name
    value: Any
    source: str  # the spec field(s) it comes from, e.g. "kv_cache.dtype"
    why: str
    evidence: str = ""
    plus: bool = False  # Hydra (hydra, ray_init): key not declared in verl's YAML, needs '+'

    @property
    def override(self) -> str:
        return hydra_override(self.key, self.value, "+" if self.plus else "")


@dataclass
class SettingsPlan:
    backend: str  # e.g. "megatron+vllm" or "vllm"
    entrypoint: list[str] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Bundle folders shipped to every Ray worker as runtime_env py_modules (the runtime patch set), and the
    # Hydra key launch.sh uses for them outside a Ray job (its value, an absolute path, is known only there).
    py_modules: list[str] = field(default_factory=list)
    py_modules_key: str = ""
    # The Hydra key launch.sh gives the job's working_dir outside a Ray job (an absolute path known only there).
    working_dir_key: str = ""

    def add(
        self,
        layer: Layer,
        key: str,
        value: Any,
        source: str,
        why: str,
        evidence: str = "",
        plus: bool = False,
    ) -> None:
        for i, existing in enumerate(self.settings):
            if existing.layer == layer and existing.key == key:
                self.settings[i] = Setting(layer, key, value, source, why, evidence, plus)
                return
        self.settings.append(Setting(layer, key, value, source, why, evidence, plus))

    def of(self, layer: Layer) -> list[Setting]:
        return [s for s in self.settings if s.layer == layer]

    def get(self, layer: Layer, key: str) -> Optional[Setting]:
        return next((s for s in self.settings if s.layer == layer and s.key == key), None)

    @property
    def overrides(self) -> list[str]:
        return [s.override for s in self.of("hydra")]

    @property
    def ray_init_overrides(self) -> list[str]:
        return [s.override for s in self.of("ray_init")]

    @property
    def env(self) -> dict[str, str]:
        return {s.key: str(s.value) for s in sorted(self.of("env"), key=lambda s: s.key)}

    @property
    def patches(self) -> list[str]:
        return sorted(s.key for s in self.of("patch"))


def serve_flags(plan: SettingsPlan, profile: Profile, args: list[tuple[str, Any, str, str]]) -> list[str]:
    """Engine flags for a standalone serve command: (fact id of the flag, value or None for a bare switch,
    spec source, why). Flag spellings come from the engine profile; each flag is recorded in the plan."""
    argv: list[str] = []
    for fact_id, value, source, why in args:
        flag = profile.value(fact_id)
        argv.append(flag)
        if value is not None:
            argv.append(str(value))
        plan.add("engine_arg", flag, True if value is None else value, source, why, profile.evidence(fact_id))
    return argv
