"""Rule examples, the ruff way: each rule carries a spec fragment that makes it fire and one (or more) that keep
it quiet, next to its check. A fragment is merged over one base spec (fp8spec/data/rule_examples_base.yaml, on
which every rule is quiet); files an example needs (a reward function) are written beside the spec.

`fp8spec rules CODE` prints them; one test (tests/rules/test_rules.py) validates every rule's examples for real.
The named fragments below are the ones several rules share."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Union

from ruamel.yaml import YAML

Fragment = Mapping[str, Any]

_BASE = Path(__file__).resolve().parent.parent / "data" / "rule_examples_base.yaml"
BASE_NAME = "fp8spec/data/rule_examples_base.yaml"

# The MoE model (128 experts, expert width 768) most layout and routing examples run.
MOE: Fragment = {"model": {"name": "Qwen/Qwen3-30B-A3B-Base", "path": "/models/Qwen3-30B-A3B-Base"}}
# End-to-end FP8 training on Megatron (tp 2 keeps the 8B dense model's state beside the engine).
MEGATRON_FP8: Fragment = {"training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 2}}}
MEGATRON_TP1: Fragment = {"training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 1}}}
DEEPSEEK: Fragment = {"model": {"name": "deepseek-ai/DeepSeek-V3", "path": "/models/DeepSeek-V3"}}
# The DeepSeek-V3 end-to-end FP8 run on 4 x 8 H200 whose training state alone does not fit.
DEEPSEEK_E2E: Fragment = {
    "model": {"name": "deepseek-ai/DeepSeek-V3", "path": "/models/DeepSeek-V3"},
    "hardware": {"gpu": "h200", "nodes": 4, "gpus_per_node": 8},
    "training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 8, "pp": 4, "ep": 8}},
    "rollout": {"tp": 8},
}
# A custom reward function as users write them for verl, for the examples that name one (REWARD_FILES).
REWARD_FILE = "reward.py"
REWARD_FILES: Mapping[str, str] = {
    REWARD_FILE: "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0\n"
}


def fragment(*parts: Fragment) -> dict[str, Any]:
    """The parts merged in order (a later mapping's keys win, nested mappings merge): one fragment."""
    out: dict[str, Any] = {}
    for part in parts:
        _merge(out, part)
    return out


def _merge(into: dict[str, Any], patch: Fragment) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)


@lru_cache(maxsize=1)
def _base() -> dict[str, Any]:
    with open(_BASE, encoding="utf-8") as fh:
        data = YAML(typ="safe").load(fh)
    assert isinstance(data, dict)
    return data


def base_spec() -> dict[str, Any]:
    """A fresh copy of the spec every example is a fragment of."""
    return copy.deepcopy(_base())


@dataclass(frozen=True, eq=False)
class Examples:
    """``bad`` makes the rule fire with a message containing ``message``; each of ``good`` keeps it quiet.
    ``files`` (name -> text) are written beside the spec for both."""

    bad: Fragment
    good: Union[Fragment, tuple[Fragment, ...]]
    message: str
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def good_fragments(self) -> tuple[Fragment, ...]:
        return self.good if isinstance(self.good, tuple) else (self.good,)

    def bad_spec(self) -> dict[str, Any]:
        return fragment(base_spec(), self.bad)

    def good_specs(self) -> list[dict[str, Any]]:
        return [fragment(base_spec(), good) for good in self.good_fragments]
