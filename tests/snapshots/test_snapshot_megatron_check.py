"""Megatron's own TransformerConfig validation on CPU torch, and the static TE recipe check.

The Megatron tests need megatron-core importable (``pip install --no-deps megatron-core==0.16.1``);
without it they are skipped with that reason (under CI they fail). The TE tests only read the committed snapshot.
"""

from __future__ import annotations

import pytest

from fp8spec.trainers.megatron import config_check as mc
from tests.conftest import skip_missing_extra

REASON = mc.unavailable_reason()
needs_megatron = pytest.mark.usefixtures("megatron_core")


@pytest.fixture
def megatron_core() -> None:
    if REASON is not None:
        skip_missing_extra(REASON)

# The paper's Megatron arm: blockwise recipe, hybrid format, first/last layer in BF16, FP32 router.
BLOCKWISE_HYBRID = {
    "fp8": "hybrid",
    "fp8_recipe": "blockwise",
    "first_last_layers_bf16": True,
    "num_layers_at_start_in_bf16": 1,
    "num_layers_at_end_in_bf16": 1,
    "moe_router_dtype": "fp32",
}


@needs_megatron
def test_accepts_blockwise_hybrid():
    result = mc.validate_transformer_config(BLOCKWISE_HYBRID, optimizer_overrides={"fp8_recipe": "blockwise"})
    assert result.errors == []
    assert result.ok
    assert result.version


@needs_megatron
def test_accepts_fp8_param_with_fp8():
    assert mc.check_transformer_config({"fp8": "e4m3", "fp8_recipe": "blockwise", "fp8_param": True}) == []


@needs_megatron
def test_rejects_first_last_bf16_with_delayed():
    errors = mc.check_transformer_config({**BLOCKWISE_HYBRID, "fp8_recipe": "delayed"})
    assert errors == ["TransformerConfig: ValueError: Delayed scaling does not support first / last layer in BF16."]


@needs_megatron
def test_rejects_fp8_param_without_fp8():
    errors = mc.check_transformer_config({"fp8_param": True})
    assert errors == ["TransformerConfig: ValueError: fp8_param must be used together with fp8 mode."]


@needs_megatron
def test_rejects_bf16_layer_counts_beyond_the_model():
    errors = mc.check_transformer_config({**BLOCKWISE_HYBRID, "num_layers_at_end_in_bf16": 5}, num_layers=4)
    assert len(errors) == 1 and "num_layers_at_end_in_bf16 (5)" in errors[0]


@needs_megatron
def test_rejects_unknown_fields_and_values_outside_the_literal():
    errors = mc.check_transformer_config({"fp8": "e5m2", "fp8_recipe": "block", "fp8_recipie": "blockwise"})
    assert "TransformerConfig: unknown field 'fp8_recipie'" in errors[0]
    assert any("fp8='e5m2' is not one of ['e4m3', 'hybrid']" in e for e in errors)
    assert any("fp8_recipe='block'" in e for e in errors)


@needs_megatron
def test_optimizer_config():
    assert mc.check_optimizer_config({"fp8_recipe": "blockwise"}) == []
    assert "unknown field 'fp8'" in mc.check_optimizer_config({"fp8": "hybrid"})[0]


def test_te_recipe_check_static():
    assert mc.check_te_recipe("blockwise", {"fp8_format": "E4M3", "use_f32_scales": True}) == []
    assert mc.check_te_recipe(None) == []
    errors = mc.check_te_recipe("blockwise", {"fp8_quant_fwd_inp": "x", "block_len": 64})
    assert any("class attribute fixed at import time" in e for e in errors)
    assert any("no field 'block_len'" in e for e in errors)
    assert "no TransformerEngine recipe mapping" in mc.check_te_recipe("nvfp4")[0]
