"""The reader's and the schema's codes (E0xx, S0xx) with their explanations, kept as data in
fp8spec/data/input_codes.yaml; `fp8spec rules CODE` prints them beside the rules."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ruamel.yaml import YAML

_FILE = Path(__file__).resolve().parent.parent / "data" / "input_codes.yaml"


@dataclass(frozen=True)
class InputCode:
    code: str
    name: str
    summary: str
    why: str
    fix: str

    @property
    def exit_code(self) -> int:
        return 2 if self.code.startswith("E") else 1

    @property
    def kind(self) -> str:
        return "unreadable input" if self.code.startswith("E") else "schema"


@lru_cache(maxsize=1)
def input_codes() -> dict[str, InputCode]:
    with open(_FILE, encoding="utf-8") as fh:
        data = YAML(typ="safe").load(fh)
    return {
        code: InputCode(code, e["name"], e["summary"], " ".join(e["why"].split()), e["fix"])
        for code, e in sorted(data.items())
    }


def input_code(code: str) -> Optional[InputCode]:
    return input_codes().get(code.strip().upper())
