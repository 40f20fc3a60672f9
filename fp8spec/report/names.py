"""The names the report reads, from data: verl's metric names and the engine's KV line (backends/, with their
evidence) and the runtime patch set's own log lines (fp8spec/data/report_lines.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from fp8spec.profiles import load_profile
from fp8spec.stack import default_stack, kind_of

_DATA = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class LinePattern:
    name: str
    regex: re.Pattern[str]
    proves: str  # the patch whose activity the line shows ('' when none)
    sync_path: str  # the weight-sync path the line shows ran ('' when none)
    source: str


@dataclass(frozen=True)
class Names:
    step_prefix: str
    separator: str
    pair: str
    metrics: dict[str, str]  # our column id -> verl's metric name
    rollout_corr_prefix: str
    kv_cache_lines: tuple[tuple[str, str], ...]  # (text before the count, text after it), one per engine
    lines: tuple[LinePattern, ...]
    silent_when_idle: frozenset[str]


_METRICS = (
    "timing_gen",
    "timing_old_log_prob",
    "timing_ref",
    "timing_update_actor",
    "timing_update_weights",
    "timing_step",
    "gen_ms_per_token",
    "response_length_mean",
    "response_length_max",
    "mismatch_kl",
    "is_mean",
    "is_clip_fraction",
    "num_preempted",
)


@lru_cache(maxsize=1)
def names() -> Names:
    stack = default_stack()  # the releases bundles are compiled for
    verl = load_profile("verl", stack["verl"])
    step = verl.value("metric.step_line")
    kv_lines = []
    for field, version in stack.items():  # each engine's own line with its KV capacity, where profiled
        profile = load_profile(kind_of(field), version)
        if profile.has("log.kv_cache_size"):
            kv = profile.value("log.kv_cache_size")
            kv_lines.append((str(kv["text"]), str(kv["unit"])))
    data = _load("report_lines.yaml")
    lines = tuple(
        LinePattern(
            name,
            re.compile(str(e["pattern"])),
            str(e.get("proves", "")),
            str(e.get("sync_path", "")),
            str(e["source"]),
        )
        for name, e in data["lines"].items()
    )
    return Names(
        step_prefix=step["prefix"],
        separator=step["separator"],
        pair=step["pair"],
        metrics={m: str(verl.value(f"metric.{m}")) for m in _METRICS},
        rollout_corr_prefix=str(verl.value("metric.rollout_corr_prefix")),
        kv_cache_lines=tuple(kv_lines),
        lines=lines,
        silent_when_idle=frozenset(data["silent_when_idle"]),
    )


@lru_cache(maxsize=None)
def thresholds() -> dict[str, Any]:
    return _load("report_thresholds.yaml")


def _load(name: str) -> Any:
    with open(_DATA / name, encoding="utf-8") as fh:
        return YAML(typ="safe").load(fh)
