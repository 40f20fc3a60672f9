"""Resolve ``linear.exclude`` against the model's real checkpoint module names.

Patterns are anchored, never substrings: a glob must match a whole name or a whole dotted suffix of it
(``mlp.gate`` matches ``model.layers.3.mlp.gate`` but never ``...mlp.gate_proj``); ``*`` spans dots;
``re:<regex>`` is matched against the whole name. Symbolic groups (lm_head, embeddings, norms, router)
come from the model catalog.

Patterns are matched in linear time (``name_match``) and once per model and exclusion list: every rule and every
hint probe of a spec shares the result, so validation does not scale with modules x probes.

The exclusions topic, in one place: this module resolves the patterns, ``name_match`` matches them, ``rules``
checks them (EXC001-EXC004), ``ignore_lists`` writes the BF16 modules in the forms each engine's ignore list
accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from fp8spec.exclusions.name_match import Budget, Pattern, PatternError, match, name_index
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
    quantized: tuple[Any, ...] = ()  # LinearModule kept in FP8
    quantized_names: frozenset[str] = frozenset()  # their names (the same object for the same exclusions)

    def symbolic(self, name: str) -> bool:
        return any(e.kind == "symbolic" and e.text == name for e in self.entries)


@lru_cache(maxsize=8)
def _index(model: Any) -> Any:
    return name_index(model.module_names())


@lru_cache(maxsize=32)
def _matched(model: Any, texts: tuple[str, ...]) -> tuple[ExclusionEntry, ...]:
    """The entries of one exclusion list on one model: each pattern matched once, in linear time."""
    groups = model.symbolic_groups()
    budget = Budget()
    entries = []
    for i, text in enumerate(texts):
        if text in SYMBOLIC_EXCLUSIONS:
            entries.append(ExclusionEntry(i, text, "symbolic", frozenset(groups.get(text, ()))))
            continue
        kind = "regex" if text.startswith("re:") else "glob"
        try:
            index = _index(model)  # built only when a spec has a pattern, once per model
            hit = frozenset(index.names[j] for j in match(Pattern(text), index, budget))
        except PatternError as err:
            entries.append(ExclusionEntry(i, text, kind, frozenset(), str(err)))
            if budget.left < 0:
                budget = Budget(0)  # over the bound: the rest are refused too, without more work
            continue
        entries.append(ExclusionEntry(i, text, kind, hit))
    return tuple(entries)


@lru_cache(maxsize=32)
def _quantized(model: Any, excluded: frozenset[str], bf16_layers: frozenset[int]) -> tuple[Any, ...]:
    # lm_head is never quantized by the engines (vLLM/SGLang build it as a vocab-parallel embedding-like
    # layer outside the FP8 linear methods), whatever the exclusions say.
    return tuple(
        m
        for m in model.linear_modules()
        if m.kind != "lm_head" and m.name not in excluded and (m.layer is None or m.layer not in bf16_layers)
    )


def resolve_exclusions(spec: Spec, model: Any) -> ExclusionPlan:
    plan = ExclusionPlan()
    if model is None:
        return plan
    plan.entries = list(_matched(model, tuple(spec.linear.exclude)))
    plan.excluded = _union(tuple(e.matched for e in plan.entries))
    layers = model.num_hidden_layers
    first, last = spec.linear.bf16_first_layers, spec.linear.bf16_last_layers
    plan.bf16_layers = frozenset(range(min(first, layers))) | frozenset(range(max(layers - last, 0), layers))
    if spec.linear.quantize:
        plan.quantized = _quantized(model, plan.excluded, plan.bf16_layers)
        plan.quantized_names = _names(plan.excluded, plan.bf16_layers, model)
    return plan


@lru_cache(maxsize=32)
def _union(sets: tuple[frozenset[str], ...]) -> frozenset[str]:
    return frozenset().union(*sets)


@lru_cache(maxsize=32)
def _names(excluded: frozenset[str], bf16_layers: frozenset[int], model: Any) -> frozenset[str]:
    """The quantized linears' names: one shared object, so caches keyed on it hit across probes."""
    return frozenset(m.name for m in _quantized(model, excluded, bf16_layers))
