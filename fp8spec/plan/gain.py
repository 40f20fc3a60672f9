"""The expected rollout speed-up of an FP8 choice, cited from data (fp8spec/data/expected_gains.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fp8spec.plan.facts import gains


@dataclass(frozen=True)
class Gain:
    low: float
    high: float
    workload: str
    source: str


def expected_gain(is_moe: bool, linear: bool, kv_fp8: bool) -> Optional[Gain]:
    """The recorded range for this model kind and choice, or None when nothing was measured for it."""
    data = gains()
    kind = "moe" if is_moe else "dense"
    for e in data["entries"]:
        if e["model"] == kind and bool(e["linear"]) == linear and bool(e["kv_fp8"]) == kv_fp8:
            return Gain(
                float(e["low"]), float(e["high"]), str(e["workload"]), " ".join(str(data["source"]).split())
            )
    return None


def gain_source() -> str:
    return " ".join(str(gains()["source"]).split())
