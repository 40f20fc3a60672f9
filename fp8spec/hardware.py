"""Target GPU facts (compute capability, architecture family), read from fp8spec/data/gpus.yaml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ruamel.yaml import YAML

_GPUS_FILE = Path(__file__).with_name("data") / "gpus.yaml"


@dataclass(frozen=True)
class Gpu:
    name: str
    cc: tuple[int, int]
    arch: str

    @property
    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"

    @property
    def is_blackwell(self) -> bool:
        return self.arch == "blackwell"


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, Gpu]:
    raw = YAML(typ="safe").load(_GPUS_FILE.read_text(encoding="utf-8"))
    table = {}
    for name, entry in raw.items():
        major, minor = (int(p) for p in str(entry["cc"]).split("."))
        table[str(name)] = Gpu(str(name), (major, minor), str(entry["arch"]))
    return table


def gpu(name: str) -> Gpu:
    return gpu_table()[name]


def version_tuple(text: str) -> tuple[int, ...]:
    """'12.9' -> (12, 9); non-numeric tails are ignored ('2.20.2.dev0' -> (2, 20, 2))."""
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits or digits != piece[: len(digits)]:
            if digits and piece.startswith(digits):
                parts.append(int(digits))
            break
        parts.append(int(digits))
    return tuple(parts)


GPU_NAMES = tuple(gpu_table())
