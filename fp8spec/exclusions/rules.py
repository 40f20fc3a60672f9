"""Exclusion lists: patterns must hit real modules, only the intended ones, and whole fused groups."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator

from fp8spec.module_names import shape_pattern
from fp8spec.rules.examples import MOE, Examples, fragment
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

_PARTIAL_WILDCARD = re.compile(r"[^.*]\*|\*[^.*]")


def _categories(model) -> dict[str, str]:
    """Module name -> category (linear kind, or norm / embedding for the rest)."""
    return _categories_cached(model)


@lru_cache(maxsize=8)
def _categories_cached(model) -> dict[str, str]:
    table = {m.name: m.kind for m in model.linear_modules()}
    groups = model.symbolic_groups()
    for name in groups.get("norms", ()):
        table.setdefault(name, "norm")
    for name in groups.get("embeddings", ()):
        table.setdefault(name, "embedding")
    return table


def _suggestions(model, text: str) -> list[str]:
    return difflib.get_close_matches(text, _candidates(model), n=2, cutoff=0.5)


@lru_cache(maxsize=8)
def _routers(model) -> frozenset[str]:
    return frozenset(model.symbolic_groups().get("router", ()))


@lru_cache(maxsize=8)
def _candidates(model) -> list[str]:
    """What a did-you-mean may propose: the model's name shapes and their tails below the layer, once per model."""
    shapes = sorted({shape_pattern(n) for n in model.module_names()})
    tails = sorted({s.split("layers.*.", 1)[-1] for s in shapes})
    return tails + shapes


@rule(
    "EXC001",
    "exclusion-matches-nothing",
    "error",
    "An exclusion pattern matches no module of the model.",
    """Exclusions are matched against the model's real checkpoint module names, anchored (a whole name or
    a whole dotted suffix, never a substring). A pattern that matches nothing is almost always a typo, and
    the module the user meant to keep in BF16 would silently run in FP8.""",
    "fix the pattern (see the did-you-mean) or remove it",
    scope="engine",
    examples=Examples(
        bad={"linear": {"exclude": ["router", "mlp.gates"]}},
        good={"linear": {"exclude": ["router", "model.layers.0.*"]}},
        message="matches no module",
    ),
)
def exclusion_matches_nothing(ctx: ResolvedSpec) -> Iterator[Finding]:
    for entry in ctx.exclusions.entries:
        if entry.kind == "symbolic":
            continue
        path = f"linear.exclude.{entry.index}"
        if entry.error:
            yield Finding(f"exclusion '{entry.text}': {entry.error}", path)
        elif not entry.matched:
            close = _suggestions(ctx.known_model, entry.text)
            hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None
            yield Finding(f"exclusion '{entry.text}' matches no module of {ctx.known_model.id}", path, hint)


@rule(
    "EXC002",
    "exclusion-too-broad",
    "error",
    "An exclusion pattern with a partial-name wildcard also catches unintended modules.",
    """A wildcard inside a name component ('mlp.gate*') reaches modules the author did not mean: on
    DeepSeek-V3 it keeps both the router (mlp.gate) and the dense layers' gate_proj in BF16 — or, in
    engines that match by substring, 'mlp.gate' catches gate_proj / gate_up_proj (prime-rl #2442,
    verl #7519). fp8spec flags such a pattern when its matches span several module kinds.""",
    "anchor the pattern on whole components, e.g. '*.mlp.gate' for the router only",
    scope="engine",
    examples=Examples(
        bad=fragment(MOE, {"linear": {"exclude": ["*gate*"]}}),
        good=fragment(MOE, {"linear": {"exclude": ["*.mlp.gate"]}}),
        message="several kinds",
    ),
)
def exclusion_too_broad(ctx: ResolvedSpec) -> Iterator[Finding]:
    cats = _categories(ctx.model)
    for entry in ctx.exclusions.entries:
        if entry.kind != "glob" or not entry.matched or not _PARTIAL_WILDCARD.search(entry.text):
            continue
        counts = Counter(cats.get(n, "other") for n in entry.matched)
        if len(counts) > 1:
            parts = ", ".join(f"{k} ({v})" for k, v in sorted(counts.items()))
            yield Finding(
                f"exclusion '{entry.text}' matches modules of several kinds: {parts}",
                f"linear.exclude.{entry.index}",
            )


@rule(
    "EXC003",
    "fused-group-split",
    "error",
    "Part of a fused group is excluded and part is quantized.",
    """Engines fuse q/k/v into qkv_proj and gate/up into gate_up_proj and quantize the fused layer as one;
    vLLM refuses mixed precision inside it ("Detected some but not all shards of {prefix} are quantized. All
    shards of fused layers to have the same precision", is_layer_skipped in vLLM's quant_utils). An MoE layer's
    routed experts are one such group: vLLM 0.24 and SGLang 0.5.12 hold every expert's gate and up projections
    in one w13 parameter and the down projections in one w2 parameter per layer and choose FP8 or BF16 for that
    layer as a whole, keyed by 'model.layers.N.mlp.experts' (vllm profile capability.moe_experts_one_unit); an
    ignored name below it (one projection, one expert) skips the whole layer's experts, so a partial exclusion
    would compile to a whole one.""",
    "exclude all members of the group (e.g. q_proj, k_proj and v_proj together) or none; for routed experts, "
    "exclude mlp.experts.* of a layer (all its routed experts) or none",
    scope="engine",
    examples=Examples(
        bad={"linear": {"exclude": ["q_proj"]}},
        good={"linear": {"exclude": ["q_proj", "k_proj", "v_proj"]}},
        message="k_proj, v_proj quantized",
    ),
)
def fused_group_split(ctx: ResolvedSpec) -> Iterator[Finding]:
    plan = ctx.exclusions
    if not ctx.spec.linear.quantize:
        return
    for key, ex, kept, first in _split_groups(ctx.model, plan.excluded):
        index = next((e.index for e in plan.entries if first in e.matched), None)
        path = f"linear.exclude.{index}" if index is not None else "linear.exclude"
        if key.endswith(".experts"):
            yield Finding(
                f"{key}: {ex} excluded but {kept} quantized; the engines quantize an MoE layer's routed experts "
                "as one unit, so this would keep all of them in BF16",
                path,
                "vLLM quantizes an MoE layer's experts as one unit: exclude `mlp.experts.*` (the layer's routed "
                "experts whole) or none",
            )
            continue
        yield Finding(f"{key}: {ex} excluded but {kept} quantized", path)


@lru_cache(maxsize=16)
def _split_groups(model, excluded: frozenset[str]) -> tuple[tuple[str, str, str, str], ...]:
    """(group shape, excluded members, kept members, first excluded name) of each split fused group, first
    of its shape only: one walk over the modules per exclusion set, however often the rules probe. A layer's
    routed experts are one group (every expert's projections)."""
    groups: dict[str, list] = {}
    for m in model.linear_modules():
        if m.group and m.fused_name:
            groups.setdefault(m.fused_name, []).append(m)
    seen: set[str] = set()
    out = []
    for fused, members in groups.items():
        excluded_members = [m for m in members if m.name in excluded]
        if excluded_members and len(excluded_members) < len(members):
            key = shape_pattern(fused)
            if key not in seen:
                seen.add(key)
                if members[0].group == "experts":
                    ex, kept = _expert_parts(members, excluded)
                else:
                    ex = ", ".join(m.name.rsplit(".", 1)[-1] for m in excluded_members)
                    kept = ", ".join(m.name.rsplit(".", 1)[-1] for m in members if m.name not in excluded)
                out.append((key, ex, kept, excluded_members[0].name))
    return tuple(out)


def _expert_parts(members: list, excluded: frozenset[str]) -> tuple[str, str]:
    """('gate_proj of 128 experts', 'up_proj, down_proj') or ('3 of 128 experts', 'the other 125'): what of a
    layer's routed experts is excluded and what is kept."""
    experts: dict[str, list] = {}
    for m in members:
        head = m.name.rsplit(".", 1)[0]
        experts.setdefault(head, []).append(m)
    whole = [e for e, ms in experts.items() if all(m.name in excluded for m in ms)]
    touched = [e for e, ms in experts.items() if any(m.name in excluded for m in ms)]
    if not whole or len(touched) > len(whole):  # some projections of the experts
        tails = sorted({m.name.rsplit(".", 1)[-1] for m in members if m.name in excluded})
        others = sorted({m.name.rsplit(".", 1)[-1] for m in members if m.name not in excluded})
        n = len(touched)
        return f"{', '.join(tails)} of {n} expert{'s' if n > 1 else ''}", ", ".join(others)
    return f"{len(whole)} of {len(experts)} experts", f"the other {len(experts) - len(whole)}"


@rule(
    "EXC004",
    "router-quantized",
    "warning",
    "The MoE router is not kept in BF16.",
    """The FP8-RL paper keeps the MoE router in BF16: quantizing it flips expert choices and raised the
    rollout/trainer mismatch KL in its MoE ablation. verl adds model.layers.{i}.mlp.gate to vLLM's
    ignored_layers for the same reason (verl #5107, #5122).""",
    "add 'router' to linear.exclude",
    scope="engine",
    examples=Examples(
        bad=fragment(MOE, {"linear": {"exclude": ["lm_head", "embeddings", "norms"]}}),
        good=MOE,
        message="48 of 48",
    ),
)
def router_quantized(ctx: ResolvedSpec) -> Iterator[Finding]:
    if not ctx.known_model.is_moe or not ctx.spec.linear.quantize:
        return
    routers = _routers(ctx.known_model)
    missing = routers - ctx.exclusions.excluded
    if missing:
        yield Finding(
            f"{len(missing)} of {len(routers)} MoE router modules of {ctx.known_model.id} would run in FP8",
            "linear.exclude",
        )
