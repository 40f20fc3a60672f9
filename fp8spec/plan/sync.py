"""The weight sync's time per sync, fitted to the syncs measured (fp8spec/data/weight_sync.yaml).

Each path's terms (a fixed cost, a cost per GB sent, a cost per tensor of the trainer's export) are fitted by least
squares to that path's measured syncs; the plan gives the fit's largest error on them. A spec outside what was
measured (another engine, trainer, GPU, rollout tp, more than one GPU, no FP8 linears) gets no time, with the
reason: nothing is extrapolated across those.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.facts import cited, weight_sync

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.plan import MemoryPlan

DATA = "fp8spec/data/weight_sync.yaml"
GB = 10**9


def export_tensors(model: ModelFacts) -> int:
    """Tensors verl 0.9.1's FSDP export yields for ``model``: one per linear (and its bias), expert projection,
    norm and the embedding; a tied lm_head is not sent again (Qwen3-8B: 399, Qwen3-30B-A3B: 18,867, as the
    sender's log counts them)."""
    linears = sum(1 + bool(m.bias) for m in model.linear_modules() if not (m.kind == "lm_head" and m.tied))
    per_layer_norms = 2 + 2 * bool(model.qk_norm) + len(model.extra_norms)
    routers = len(model.moe_layers) if model.router_bias else 0
    return linears + model.num_hidden_layers * per_layer_norms + 1 + routers + 1  # + final norm + embedding


def _term(term: str, gb: float, tensors: int) -> float:
    """What a term's cost is multiplied by for a sync of ``gb`` GB in ``tensors`` tensors."""
    return {"fixed": 1.0, "per_gb": gb, "per_tensor": float(tensors)}[term]


@dataclass(frozen=True)
class Point:
    """One measured sync and what the fit gives for it."""

    what: str
    gb: float
    tensors: int
    seconds: float
    fitted: float

    @property
    def error(self) -> float:
        return self.fitted / self.seconds - 1


@dataclass(frozen=True)
class Fit:
    path: str
    label: str
    costs: tuple[tuple[str, float], ...]  # (term, cost), in the data file's order
    sends: int  # bytes per parameter a run of this path sends
    points: tuple[Point, ...]
    basis: str

    @property
    def max_error(self) -> float:
        """The largest |fitted / measured - 1| over the measured syncs."""
        return max(abs(p.error) for p in self.points)

    @property
    def spare(self) -> int:
        """Distinct measured syncs beyond the terms: 0 means the fit passes through them and its error there says
        nothing about other models."""
        rows = {tuple(_term(t, p.gb, p.tensors) for t, _ in self.costs) for p in self.points}
        return len(rows) - len(self.costs)

    @property
    def size_term(self) -> str:
        """The term that grows with the model: what 'within the measured sizes' is judged on."""
        return "per_gb" if "per_gb" in dict(self.costs) else "per_tensor"

    def size(self, gb: float, tensors: int) -> float:
        return gb if self.size_term == "per_gb" else float(tensors)

    def size_text(self, value: float) -> str:
        return f"{value:.1f} GB" if self.size_term == "per_gb" else f"{value:,.0f} tensors"

    @property
    def size_range(self) -> tuple[float, float]:
        sizes = [self.size(p.gb, p.tensors) for p in self.points]
        return min(sizes), max(sizes)

    def covers(self, gb: float, tensors: int) -> bool:
        low, high = self.size_range
        return low <= self.size(gb, tensors) <= high

    def text(self) -> str:
        """How well the fit matches what it was fitted on."""
        low, high = self.size_range
        what = "GB" if self.size_term == "per_gb" else "tensors"
        sizes = f"{low:.1f}-{high:.1f} GB" if what == "GB" else f"{low:,.0f}-{high:,.0f} tensors"
        out = f"within {self.max_error:.0%} of its {len(self.points)} measured syncs of {sizes}"
        if self.spare <= 0:
            out += ", as many model sizes as terms"
        return out

    def seconds(self, gb: float, tensors: int) -> float:
        return sum(cost * _term(term, gb, tensors) for term, cost in self.costs)


def _solve(rows: list[list[Fraction]], ys: list[Fraction]) -> list[Fraction]:
    """Least squares through the normal equations, in exact fractions (same data, same costs, bit for bit)."""
    n = len(rows[0])
    zero = Fraction(0)
    a = [[sum((r[i] * r[j] for r in rows), zero) for j in range(n)] for i in range(n)]
    b = [sum((r[i] * y for r, y in zip(rows, ys)), zero) for i in range(n)]
    for col in range(n):
        pivot = next(i for i in range(col, n) if a[i][col] != 0)
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for i in range(n):
            if i != col and a[i][col] != 0:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * y for x, y in zip(a[i], a[col])]
                b[i] -= f * b[col]
    return [b[i] / a[i][i] for i in range(n)]


def _seconds(entry: dict) -> float:
    value = cited(entry["seconds"])
    return float(value[entry["index"]] if "index" in entry else value)


@lru_cache(maxsize=None)
def fits() -> dict[str, Fit]:
    from fp8spec.catalog import get_model

    out = {}
    for path, e in weight_sync()["paths"].items():
        terms = list(e["terms"])
        sends = int(e["sends"])
        measured = []
        for p in e["points"]:
            model = get_model(p["model"])
            gb = model.num_parameters() * int(p["sent_bytes_per_param"]) / GB
            measured.append((f"{p['model']}, {p['what']}", gb, export_tensors(model), _seconds(p)))
        rows = [[Fraction(_term(t, gb, n)) for t in terms] for _, gb, n, _ in measured]
        costs = tuple((t, float(c)) for t, c in zip(terms, _solve(rows, [Fraction(s) for *_, s in measured])))
        fit = Fit(path, str(e["label"]), costs, sends, (), " ".join(str(e["basis"]).split()))
        points = tuple(Point(w, gb, n, s, fit.seconds(gb, n)) for w, gb, n, s in measured)
        out[path] = Fit(path, fit.label, costs, sends, points, fit.basis)
    return out


@lru_cache(maxsize=None)
def copy_seconds_per_gb() -> float:
    """The offloaded trainer's host-to-device copy, seconds per GB (fitted through the origin)."""
    pts = weight_sync()["offload_copy"]["points"]
    return float(
        sum(Fraction(_seconds(p)) * Fraction(p["gb"]) for p in pts) / sum(Fraction(p["gb"]) ** 2 for p in pts)
    )


@dataclass(frozen=True)
class SyncTime:
    """The plan's time for one weight sync, or why it has none."""

    path: Optional[str]  # the sync path the bundle compiles ('direct', 'fp8spec', 'verl'); None: no FP8 sync
    seconds: Optional[float]
    why: str = ""  # when seconds is None
    fit: Optional[Fit] = None
    send_gb: float = 0.0
    tensors: int = 0
    send_s: float = 0.0
    copy_gb: float = 0.0  # the offloaded trainer's parameters copied to the GPU first
    copy_s: float = 0.0

    @property
    def label(self) -> str:
        if self.fit is not None:
            return self.fit.label
        return {"direct": "the direct path", "fp8spec": "fast_block_quant", "verl": "verl's quantizer"}.get(
            self.path or "", "no FP8 weight sync"
        )


def _outside_scope(plan: MemoryPlan) -> str:
    """Why the measured syncs do not cover this spec ('' when they do)."""
    scope = weight_sync()["scope"]
    spec = plan.spec
    engine, trainer, gpu_name = plan.setup.engine, spec.training.backend, spec.hardware.gpu
    # data names what was measured; code special-cases none
    checks = (
        (engine in scope["engines"], f"not measured for {engine}"),
        (trainer in scope["trainers"], f"not measured with the {trainer} trainer"),
        (gpu_name in scope["gpus"], f"not measured on {gpu_name}"),
        (plan.setup.tp in scope["rollout_tps"], f"not measured at rollout tp {plan.setup.tp}"),
        (
            plan.world <= scope["max_gpus"],
            f"not measured on more than {scope['max_gpus']} GPU ({plan.world} GPUs: the trainer's gather across "
            "them was never timed)",
        ),
    )
    return next((why for ok, why in checks if not ok), "")


def sync_time(plan: MemoryPlan) -> SyncTime:
    """The time of one weight sync after the first for the spec's sync path (the first also builds the plan and
    buffers: 2.8 s against 0.35 s in the real-size run)."""
    from fp8spec.resolve.sync_path import sync_quantizer

    if plan.ctx is None:
        return SyncTime(None, None, "no resolved spec to plan the sync of")
    path = sync_quantizer(plan.ctx)  # the path `fp8spec compile` picks
    if path is None:
        return SyncTime(
            None, None, "no FP8 weight sync (linear.quantize is off); only FP8 syncs were measured"
        )
    why = _outside_scope(plan)
    fit = fits().get(path)
    if not why and fit is None:
        why = f"the {path} sync path was not measured"
    if why or fit is None:
        return SyncTime(path, None, why)
    gb = plan.model.num_parameters() * fit.sends / GB
    tensors = export_tensors(plan.model)
    send_s = fit.seconds(gb, tensors)
    copy_gb = 0.0
    t = plan.trainer
    if t is not None and t.offload.get("params"):
        copy_gb = t.params / GB
    copy_s = copy_gb * copy_seconds_per_gb()
    return SyncTime(path, send_s + copy_s, "", fit, gb, tensors, send_s, copy_gb, copy_s)
