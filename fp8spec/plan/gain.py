"""The expected rollout speed-up of an FP8 choice, cited from data (fp8spec/data/expected_gains.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fp8spec.plan.facts import gains, trainer_gains


@dataclass(frozen=True)
class Gain:
    low: float
    high: float
    workload: str
    source: str


def expected_gain(engine: str, architecture: str, linear: bool, kv_fp8: bool) -> Optional[Gain]:
    """The recorded range for this rollout engine, model class (architecture) and choice, or None when nothing
    was measured for them."""
    data = gains()
    for e in data["entries"]:
        if (
            engine in e["engines"]  # data names the engines measured; code special-cases none
            and architecture in e["architectures"]
            and bool(e["linear"]) == linear
            and bool(e["kv_fp8"]) == kv_fp8
        ):
            return Gain(
                float(e["low"]), float(e["high"]), str(e["workload"]), " ".join(str(data["source"]).split())
            )
    return None


def gain_source() -> str:
    return " ".join(str(gains()["source"]).split())


@dataclass(frozen=True)
class TrainerGain:
    """FP8 over BF16 speed of one decoder layer (forward + backward) at the measured length nearest the spec's."""

    ratio: float
    tokens: int
    workload: str
    source: str


def trainer_gain(is_moe: bool, recipe: str, tokens: int) -> Optional[TrainerGain]:
    """The measured layer speed ratio for this model kind and TE recipe, or None when it was not measured."""
    data = trainer_gains()
    kind = "moe" if is_moe else "dense"
    rows = [e for e in data["entries"] if e["model"] == kind and e["recipe"] == recipe]
    if not rows:
        return None
    e = min(rows, key=lambda row: (abs(int(row["tokens"]) - tokens), int(row["tokens"])))
    return TrainerGain(
        float(e["ratio"]), int(e["tokens"]), str(e["workload"]), " ".join(str(data["source"]).split())
    )
