"""Loader of tests/data/vllm024_h200_kv_capacity.json: real vLLM 0.24.0 start-up figures on an H200."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

PATH = Path(__file__).resolve().parents[1] / "data" / "vllm024_h200_kv_capacity.json"
MODES = {"bf16": (False, "bf16"), "fp8": (True, "bf16"), "fp8_kv": (True, "fp8_e4m3")}
REQUIRED = {"model": str, "mode": str, "gpu_memory_utilization": float, "max_model_len": int,
            "kv_cache_tokens": int, "available_kv_gib": float, "weights_gib": float, "source": str}
OPTIONAL = {"max_num_batched_tokens": int, "max_num_seqs": int, "tensor_parallel_size": int, "cuda_graphs": bool,
            "total_memory_bytes": int, "peak_activation_gib": float, "non_torch_gib": float, "cudagraph_gib": float}


@dataclass(frozen=True)
class Measurement:
    model: str
    mode: str
    gpu_memory_utilization: float
    max_model_len: int
    kv_cache_tokens: int
    available_kv_gib: float
    weights_gib: float
    source: str
    max_num_batched_tokens: Optional[int] = None
    max_num_seqs: Optional[int] = None
    tensor_parallel_size: int = 1
    cuda_graphs: bool = True
    total_memory_bytes: Optional[int] = None
    peak_activation_gib: Optional[float] = None
    non_torch_gib: Optional[float] = None
    cudagraph_gib: Optional[float] = None

    @property
    def linear_fp8(self) -> bool:
        return MODES[self.mode][0]

    @property
    def kv_dtype(self) -> str:
        return MODES[self.mode][1]


def _checked(index: int, entry: dict) -> Measurement:
    where = f"{PATH.name} entries[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: not an object")
    unknown = set(entry) - set(REQUIRED) - set(OPTIONAL)
    missing = set(REQUIRED) - set(entry)
    if unknown or missing:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    for name, value in entry.items():
        kind = {**REQUIRED, **OPTIONAL}[name]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise ValueError(f"{where}.{name}: expected {kind.__name__}, got {value!r}")
    if entry["mode"] not in MODES:
        raise ValueError(f"{where}.mode: {entry['mode']!r} is not one of {sorted(MODES)}")
    return Measurement(**entry)


def load(path: Path = PATH) -> tuple[str, list[Measurement]]:
    """(gpu name, measurements); raises ValueError naming the entry and field that is malformed."""
    data = json.loads(path.read_text(encoding="utf-8"))
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"{path.name}: 'entries' must be a list")
    return str(data["gpu"]), [_checked(i, e) for i, e in enumerate(entries)]
