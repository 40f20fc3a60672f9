"""The data the planner reads: GPU memory, backend memory facts (from backends/), estimates and gains.

Numbers live in data files, never in this package's code: fp8spec/data/{gpu_memory,memory_estimates,
expected_gains,trainer_gains,weight_sync,measured}.yaml and the ``memory.*`` facts of the backend profiles. A measured figure
lives once, in measured.yaml; the other data files cite it as ``measured:<id>`` and read its value through
``measured``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ruamel.yaml import YAML

_DATA = Path(__file__).resolve().parent.parent / "data"


@lru_cache(maxsize=None)
def _load(name: str) -> Any:
    return YAML(typ="safe").load((_DATA / name).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class GpuMemory:
    name: str
    total_bytes: Optional[int]
    sms: Optional[int]
    source: str


def gpu_memory(name: str) -> GpuMemory:
    entry = _load("gpu_memory.yaml").get(name) or {}
    mib = entry.get("mib")
    return GpuMemory(
        name, None if mib is None else int(mib) << 20, entry.get("sms"), str(entry.get("source", ""))
    )


def estimate(section: str, name: str) -> Any:
    """One estimated term (value only) from memory_estimates.yaml."""
    return _load("memory_estimates.yaml")[section][name]["value"]


def engine_beyond_share(engine: str) -> int:
    """GPU bytes a colocated rollout engine's process holds beyond its memory share (the memory_estimates.yaml
    term the engine names: measured for vLLM, a CUDA context where not measured)."""
    from fp8spec.engines import get_engine

    return int(estimate(*get_engine(engine).beyond_share_estimate))


def estimate_basis(section: str, name: str) -> str:
    return " ".join(str(_load("memory_estimates.yaml")[section][name]["basis"]).split())


CITATION = "measured:"


def measured(figure_id: str) -> Any:
    """The value of one measured figure (fp8spec/data/measured.yaml; docs/results.md shows it)."""
    figures = _load("measured.yaml")["figures"]
    if figure_id not in figures:
        raise KeyError(f"no figure {figure_id!r} in fp8spec/data/measured.yaml")
    return figures[figure_id]["value"]


def _cited(value: Any) -> Any:
    """A data file's value, with a ``measured:<id>`` citation replaced by that figure's value."""
    if isinstance(value, str) and value.startswith(CITATION):
        return measured(value[len(CITATION) :])
    return value


@lru_cache(maxsize=None)
def _with_figures(name: str) -> dict:
    data = dict(_load(name))
    data["entries"] = [{k: _cited(v) for k, v in e.items()} for e in data["entries"]]
    return data


def weight_sync() -> dict:
    """fp8spec/data/weight_sync.yaml as written: its measured syncs cite measured.yaml, read through ``cited``."""
    return _load("weight_sync.yaml")


def cited(value: Any) -> Any:
    return _cited(value)


def gains() -> dict:
    return _with_figures("expected_gains.yaml")


def trainer_gains() -> dict:
    return _with_figures("trainer_gains.yaml")


@lru_cache(maxsize=None)
def trainer_layouts() -> dict:
    data = _with_figures("trainer_layouts.yaml")
    return {**data, "mismatch": {k: _cited(v) for k, v in data["mismatch"].items()}}


@dataclass(frozen=True)
class ProfileFacts:
    """``memory.*`` facts of one backend profile, with the version they were read from."""

    kind: str
    version: str
    requested_version: str

    @property
    def fallback(self) -> bool:
        return self.version != self.requested_version

    def value(self, fact_id: str) -> Any:
        from fp8spec.profiles import load_profile

        return load_profile(self.kind, self.version).value(fact_id)

    def evidence(self, fact_id: str) -> str:
        from fp8spec.profiles import load_profile

        return load_profile(self.kind, self.version).evidence(fact_id)


def profile_facts(kind: str, version: str, fallback_version: str, probe: str) -> ProfileFacts:
    """The profile of ``kind`` at ``version`` when it has ``probe``, else the ``fallback_version`` one."""
    from fp8spec.profiles import ProfileNotFound, load_profile

    try:
        if load_profile(kind, version).has(probe):
            return ProfileFacts(kind, version, version)
    except ProfileNotFound:
        pass
    return ProfileFacts(kind, fallback_version, version)
