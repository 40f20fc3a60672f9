"""Resolve ``linear.exclude`` against the model's real checkpoint module names.

Patterns are anchored, never substrings: a glob must match a whole name or a whole dotted suffix of it
(``mlp.gate`` matches ``model.layers.3.mlp.gate`` but never ``...mlp.gate_proj``); ``*`` spans dots;
``re:<regex>`` is matched against the whole name. Symbolic groups (lm_head, embeddings, norms, router)
come from the model catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from fp8spec.specfile.model import SYMBOLIC_EXCLUSIONS, Spec


@dataclass(frozen=True)
class ExclusionEntry:
    index: int
    text: str
    kind: str  # "symbolic" | "glob" | "regex"
    matched: frozenset[str]
    error: Optional[str] = None


@dataclass
class ExclusionPlan:
    entries: list[ExclusionEntry] = field(default_factory=list)
    excluded: frozenset[str] = frozenset()
    bf16_layers: frozenset[int] = frozenset()
    quantized: list[Any] = field(default_factory=list)  # LinearModule kept in FP8

    def symbolic(self, name: str) -> bool:
        return any(e.kind == "symbolic" and e.text == name for e in self.entries)


@lru_cache(maxsize=256)
def compile_pattern(text: str) -> re.Pattern:
    """Compile an exclusion pattern; raises re.error for a bad ``re:`` regex."""
    if text.startswith("re:"):
        return re.compile(text[3:])
    body = "".join(".*" if ch == "*" else "[^.]" if ch == "?" else re.escape(ch) for ch in text)
    return re.compile(rf"(?:.*\.)?{body}")


def matches(pattern: re.Pattern, name: str) -> bool:
    return pattern.fullmatch(name) is not None


def resolve_exclusions(spec: Spec, model: Any) -> ExclusionPlan:
    plan = ExclusionPlan()
    if model is None:
        return plan
    groups = model.symbolic_groups()
    names = model.module_names()
    excluded: set[str] = set()
    for index, text in enumerate(spec.linear.exclude):
        if text in SYMBOLIC_EXCLUSIONS:
            hit = frozenset(groups.get(text, ()))
            plan.entries.append(ExclusionEntry(index, text, "symbolic", hit))
        else:
            kind = "regex" if text.startswith("re:") else "glob"
            try:
                pattern = compile_pattern(text)
            except re.error as err:
                plan.entries.append(ExclusionEntry(index, text, kind, frozenset(), f"invalid regex: {err}"))
                continue
            hit = frozenset(n for n in names if matches(pattern, n))
            plan.entries.append(ExclusionEntry(index, text, kind, hit))
        excluded |= plan.entries[-1].matched
    plan.excluded = frozenset(excluded)
    layers = model.num_hidden_layers
    first, last = spec.linear.bf16_first_layers, spec.linear.bf16_last_layers
    plan.bf16_layers = frozenset(range(min(first, layers))) | frozenset(range(max(layers - last, 0), layers))
    if spec.linear.quantize:
        # lm_head is never quantized by the engines (vLLM/SGLang build it as a vocab-parallel embedding-like
        # layer outside the FP8 linear methods), whatever the exclusions say.
        plan.quantized = [
            m
            for m in model.linear_modules()
            if m.kind != "lm_head"
            and m.name not in plan.excluded
            and (m.layer is None or m.layer not in plan.bf16_layers)
        ]
    return plan
