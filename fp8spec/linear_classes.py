"""A model's linear modules folded into classes that every per-rank computation treats alike.

Rules probe a spec many times (each candidate rollout tp, each memory proposal), and each probe used to walk
every linear module: on an MoE model with tens of thousands of expert weights that made validation scale with
modules x probes. Here the modules are grouped once per (model, set of quantized names) into engine modules
(a fused qkv_proj, gate_up_proj, one expert's w13 or w2, or a lone linear), and equal engine modules (same
member shapes, kinds, parallel styles and precision; the routed-expert index kept apart, since expert
parallelism keeps a subset of experts per rank) are counted instead of listed. A per-rank computation then
costs one pass over a few hundred classes, whatever the model's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from fp8spec.module_names import shape_pattern
from fp8spec.no_gc import paused_gc


@dataclass(frozen=True)
class Member:
    """One linear of an engine module, without its layer and expert numbers."""

    shape: str  # the name with every number as '*' (model.layers.*.self_attn.q_proj)
    suffix: str
    kind: str
    out_features: int
    in_features: int
    parallel: str
    group: Optional[str]
    bias: bool
    quantized: bool


@dataclass(frozen=True)
class EngineModule:
    """A class of engine modules: its members in checkpoint order, and the routed-expert index (or None)."""

    members: tuple[Member, ...]
    expert: Optional[int]
    fused: bool  # the members share one fused engine module (fused_name); else a lone linear


@lru_cache(maxsize=32)
def engine_modules(model: Any, quantized: frozenset[str]) -> tuple[tuple[EngineModule, int], ...]:
    """(class, count) in checkpoint order of first occurrence; lm_head is left out (vocab-parallel, apart)."""
    counts: dict[tuple[int, tuple[bool, ...]], int] = {}
    structure = _structure(model)
    with paused_gc():
        for base, names in structure.instances:
            key = (base, tuple(map(quantized.__contains__, names)))
            counts[key] = counts.get(key, 0) + 1
    out = []
    for (base, flags), n in counts.items():
        members, expert, fused = structure.bases[base]
        classed = tuple(Member(*f, q) for f, q in zip(members, flags))  # type: ignore[call-arg]
        out.append((EngineModule(classed, expert, fused), n))
    return tuple(out)


@dataclass(frozen=True)
class _Structure:
    """A model's engine modules without precision: distinct member tuples, and per instance its names."""

    bases: tuple[tuple[tuple[tuple[Any, ...], ...], Optional[int], bool], ...]
    instances: tuple[tuple[int, tuple[str, ...]], ...]


def _fields(m: Any, shape: str) -> tuple:
    return (shape, m.suffix, m.kind, m.out_features, m.in_features, m.parallel, m.group, m.bias)


@lru_cache(maxsize=8)
def _structure(model: Any) -> _Structure:
    with paused_gc():
        grouped: dict[Any, list[Any]] = {}
        for m in model.linear_modules():
            kind = m.kind
            if kind == "lm_head":
                continue
            if m.group == "experts":  # one expert's w13 (gate + up) or w2 (down)
                key: Any = (m.name.rpartition(".experts.")[0], m.expert, kind == "expert_in")
            else:
                key = m.fused_name or m.name
            members = grouped.get(key)
            if members is None:
                grouped[key] = [m]
            else:
                members.append(m)
        shapes: dict[str, str] = {}  # memo: experts of every layer share a few shapes
        expert_fields: dict[tuple[str, str], tuple] = {}  # (head, rest) -> the fields every expert shares
        bases: dict[tuple, int] = {}
        instances = []
        for key, members in grouped.items():
            fields = []
            for m in members:
                if isinstance(key, tuple):  # 'head.experts.N.rest' -> shape(head).experts.*.shape(rest)
                    head = key[0]
                    rest = m.name[len(head) + len(".experts.") :].partition(".")[2]
                    f = expert_fields.get((head, rest))
                    if f is None:
                        shape = shapes.get(head)
                        if shape is None:
                            shape = shapes[head] = shape_pattern(head)
                        shape = f"{shape}.experts.*.{shape_pattern('.' + rest)[1:]}"
                        f = expert_fields[(head, rest)] = _fields(m, shape)
                    fields.append(f)
                else:
                    fields.append(_fields(m, shape_pattern(m.name)))
            first = members[0]
            expert = first.expert if isinstance(key, tuple) else None
            base = (tuple(fields), expert, first.group is not None)
            index = bases.setdefault(base, len(bases))
            instances.append((index, tuple([m.name for m in members])))
        return _Structure(tuple(bases), tuple(instances))
