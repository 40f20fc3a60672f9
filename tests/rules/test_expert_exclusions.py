"""A layer's routed experts are one unit to the engines (vLLM 0.24 and SGLang 0.5.12 keep every expert's gate/up in
one w13 and every down projection in one w2 parameter per layer, and pick FP8 or BF16 per layer: backends/*
capability.moe_experts_one_unit): a partial expert exclusion is refused with a located finding, and a whole one is
the same in the plan, explain's quantized set and the compiled ignore list."""

from __future__ import annotations

import pytest

from fp8spec.exclusions.ignore_lists import engine_module_names
from fp8spec.profiles.loader import load_profile
from tests.conftest import BASE_SPEC, MOE, patched

DEFAULTS = ["lm_head", "embeddings", "norms", "router"]


def _spec(*extra: str) -> dict:
    return patched(BASE_SPEC, MOE, {"rollout": {"tp": 2}, "linear": {"exclude": DEFAULTS + list(extra)}})


@pytest.mark.parametrize("pattern", [
    "mlp.experts.*.gate_proj",
    "mlp.experts.*.down_proj",
    "model.layers.*.mlp.experts.5.*",
    "model.layers.3.mlp.experts.*.up_proj",
    "model.layers.3.mlp.experts.7.down_proj",
])
def test_a_partial_expert_exclusion_is_refused_where_it_is_written(pattern, validate):
    v = validate(_spec(pattern))
    found = [d for d in v.diagnostics if d.code == "EXC003"]
    assert found and found[0].severity == "error", [d.render() for d in v.diagnostics]
    assert found[0].path == f"linear.exclude.{len(DEFAULTS)}"
    assert "quantize an MoE layer's routed experts as one unit" in found[0].message
    assert found[0].hint.startswith("vLLM quantizes an MoE layer's experts as one unit: exclude `mlp.experts.*`")


@pytest.mark.parametrize("pattern,layers", [("mlp.experts.*", None), ("model.layers.3.mlp.experts.*", {3})])
def test_a_whole_expert_exclusion_agrees_in_plan_and_engine_config(pattern, layers, validate):
    v = validate(_spec(pattern))
    assert not [d for d in v.diagnostics if d.code.startswith("EXC")], [d.render() for d in v.diagnostics]
    ctx = v.context
    quantized = {m.name for m in ctx.exclusions.quantized}
    ignored = set(engine_module_names(ctx))
    experts = [m for m in ctx.model.linear_modules() if m.group == "experts"]
    for m in experts:
        layer = int(m.name.split(".")[2])
        excluded = layers is None or layer in layers
        assert (m.name not in quantized) == excluded, m.name  # the plan's and explain's view
        assert (m.fused_name in ignored) == excluded, m.fused_name  # what the engine is told


@pytest.mark.parametrize("engine,version", [("vllm", "0.24.0"), ("sglang", "0.5.12")])
def test_the_engine_fact_is_recorded_with_evidence(engine, version):
    fact = load_profile(engine, version).facts["capability.moe_experts_one_unit"]
    assert fact.value is True and "w13_weight" in fact.evidence
