"""The BF16 (not quantized) linear modules of a spec, in the forms each engine's ignore list accepts."""

from __future__ import annotations

import re
from collections import defaultdict

from fp8spec.module_names import shape_pattern
from fp8spec.resolve.valid import ValidSpec


def engine_module_names(ctx: ValidSpec) -> list[str]:
    """Engine-side names of the linears kept in BF16 (routed experts collapse into their fused 'experts')."""
    model = ctx.model
    if not ctx.spec.linear.quantize:
        return []
    quantized = {m.name for m in ctx.exclusions.quantized}
    names: list[str] = []
    seen: set[str] = set()
    for m in model.linear_modules():
        if m.name in quantized or m.kind == "lm_head":
            continue  # lm_head is never quantized by the engines (not a LinearBase / quantizable layer)
        name = (m.fused_name or m.name) if m.group == "experts" else m.name
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def compress(names: list[str], all_names: list[str], style: str) -> list[str]:
    """Collapse names that differ only in layer/expert indices into one pattern when every index is covered.

    style "fnmatch" gives 'model.layers.*.mlp.gate'; "regex" gives 're:model\\.layers\\.\\d+\\.mlp\\.gate$';
    "exact" keeps the names.
    """
    if style == "exact":
        return list(names)
    total: defaultdict[str, int] = defaultdict(int)
    for n in all_names:
        total[shape_pattern(n)] += 1
    chosen = defaultdict(list)
    for n in names:
        chosen[shape_pattern(n)].append(n)
    out: list[str] = []
    for shape, members in chosen.items():
        if len(members) == total[shape] and len(members) > 1:
            if style == "fnmatch":
                out.append(shape)
            else:
                out.append("re:" + re.escape(shape).replace(r"\.\*", r"\.\d+") + "$")
        else:
            out.extend(members)
    return out


def all_engine_names(ctx: ValidSpec) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for m in ctx.model.linear_modules():
        name = (m.fused_name or m.name) if m.group == "experts" else m.name
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out
