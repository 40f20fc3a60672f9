"""The expected rollout speed-up of an FP8 choice, cited from data (fp8spec/data/expected_gains.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.facts import cited, gains, trainer_gains

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.rollout import RolloutResult


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


def measured_running() -> int:
    """Sequences running at once per engine in the measurements behind the speed-ups."""
    return int(gains()["measured_running"])


def running_caveat(running: int) -> str:
    """'' when the spec runs as many sequences at once as the speed-ups were measured at; else what differs."""
    measured = measured_running()
    if running == measured:
        return ""
    return (
        f"the speed-ups were measured with {measured} sequences running at once per engine; this spec runs "
        f"{running} per replica (rollout.max_num_seqs, or the step's sequences per replica), so they may not hold"
    )


@dataclass(frozen=True)
class CapacityNote:
    """The BF16 engine holds every sequence of the step at full length: the measured speed-ups came from BF16
    engines that preempted, and FP8's larger KV cache buys no concurrency here."""

    running: int
    fit: float  # sequences the BF16 engine's KV cache holds at the step's full length
    gain: float  # FP8's generation speed-up measured where the BF16 engine held them all
    workload: str

    def text(self) -> str:
        return (
            f"the BF16 engine already holds this step's {self.running} sequences at full length ({self.fit:.1f} "
            "fit), and the speed-ups above were measured where BF16 preempted: FP8's larger KV cache buys no "
            f"concurrency here. Measured where BF16 held them all: {self.gain:+.1%} ({self.workload})"
        )

    def short(self) -> str:
        return (
            f"the plan's BF16 engine holds all {self.running} sequences, where FP8 measured {self.gain:+.1%}"
        )


def capacity_note(bf16: Optional[RolloutResult]) -> Optional[CapacityNote]:
    """A note when the spec's BF16 column runs the step without preemption (None otherwise)."""
    if bf16 is None or not bf16.fits_without_preemption:
        return None
    fits = gains()["bf16_fits"]
    return CapacityNote(
        bf16.running, bf16.concurrency, float(cited(fits["gain"])), " ".join(str(fits["workload"]).split())
    )


def gain_source() -> str:
    return " ".join(str(gains()["source"]).split())


@dataclass(frozen=True)
class TrainerGain:
    """FP8 over BF16 speed of one decoder layer (forward + backward) at the measured length nearest the spec's."""

    ratio: float
    tokens: int
    workload: str
    source: str


def trainer_gain(model: ModelFacts, gpu_arch: str, recipe: str, tokens: int) -> Optional[TrainerGain]:
    """The measured layer speed ratio for this model's class, GPU generation and TE recipe, or None when it was
    not measured (``trainer_gain_unmeasured`` says why)."""
    if trainer_gain_unmeasured(model, gpu_arch, recipe):
        return None
    kind = "moe" if model.is_moe else "dense"
    rows = [e for e in trainer_gains()["entries"] if e["model"] == kind and e["recipe"] == recipe]
    e = min(rows, key=lambda row: (abs(int(row["tokens"]) - tokens), int(row["tokens"])))
    return TrainerGain(
        float(e["ratio"]),
        int(e["tokens"]),
        str(e["workload"]),
        " ".join(str(trainer_gains()["source"]).split()),
    )


def trainer_gain_unmeasured(model: ModelFacts, gpu_arch: str, recipe: str) -> str:
    """Why no measured layer figure covers this spec ('' when one does): never a figure carried over from
    another architecture, GPU generation or recipe."""
    data = trainer_gains()
    kind = "moe" if model.is_moe else "dense"
    scope = data["classes"][kind]
    if model.architecture not in scope["architectures"]:
        return f"{model.architecture} layers were not measured (only {scope['measured']})"
    if gpu_arch not in scope["gpu_arch"]:
        return f"not measured on {gpu_arch} GPUs (only {scope['measured']})"
    if not any(e["model"] == kind and e["recipe"] == recipe for e in data["entries"]):
        return f"the {recipe} recipe was not measured (only {scope['measured']})"
    return ""
