"""module_precision: training.bf16_modules as megatron-core's per-module quant_recipe, built on CPU.

The patch wraps the real ``TransformerConfig.__post_init__`` of the installed megatron-core; the recipe it attaches
is matched against the module names of a real GPTModel built on CPU (local layer spec: the same self_attention /
mlp / experts / shared_experts paths as the TE spec; an MoE FP8 config itself needs TransformerEngine installed, so
the model is built in BF16 and the FP8 config is a dense one). What TE then does with a matched module (BF16 inside
fp8_autocast(enabled=False)) needs TE and a GPU: docs/results.md#trainer-layer-cost measured it."""

from __future__ import annotations

import logging

import pytest

from fp8spec.profiles import load_profile
from fp8spec.runtime import envs
from fp8spec.runtime.trainer.module_precision import (
    BF16_CONFIG,
    MODULE_GLOBS,
    module_class,
    patch_transformer_config,
    recipe_dict,
)
from fp8spec.runtime.trainer.te_report import TEReport, te_classes
from fp8spec.specfile.training import TRAINING_MODULE_CLASSES
from tests.conftest import require


@pytest.mark.parametrize("version", ["0.18.2", "0.19.2"])
def test_the_class_table_is_the_profiles_and_the_specs(version):
    assert MODULE_GLOBS == load_profile("megatron-core", version).value("quant.module_classes")
    assert tuple(MODULE_GLOBS) == TRAINING_MODULE_CLASSES == envs.BF16_MODULE_CLASSES


def _config(**kw):
    from megatron.core.transformer.transformer_config import TransformerConfig

    base = {
        "num_layers": 4,
        "hidden_size": 64,
        "ffn_hidden_size": 128,
        "num_attention_heads": 4,
        "use_cpu_initialization": True,
    }
    return TransformerConfig(**{**base, **kw})


@pytest.fixture
def patched(monkeypatch):
    """The real TransformerConfig with the patch installed for ``classes``; restored afterwards."""
    require("megatron.core")
    import megatron.core.transformer.transformer_config as tc

    monkeypatch.setattr(tc.TransformerConfig, "__post_init__", tc.TransformerConfig.__post_init__)

    def install(classes: str) -> bool:
        return patch_transformer_config(tc, {envs.BF16_MODULES.name: classes})

    return install


def test_an_fp8_config_gets_the_recipe_of_the_named_classes(patched, caplog):
    assert patched("experts,attention")
    assert not patched("experts")  # installed once
    with caplog.at_level(logging.INFO):
        cfg = _config(fp8="hybrid", fp8_recipe="blockwise")
    from megatron.core.quantization.quant_config import RecipeConfig

    assert isinstance(cfg.quant_recipe, RecipeConfig)
    assert [m.pattern for m in cfg.quant_recipe.matchers] == [
        MODULE_GLOBS["experts"],
        MODULE_GLOBS["attention"],
    ]
    assert cfg.quant_recipe.configs[BF16_CONFIG] == {
        "transformer_engine_config_type": "TEQuantizationParams",
        "training_recipe": {},
    }
    assert "fp8spec module_precision: TransformerEngine runs experts, attention in BF16" in caplog.text


def test_a_bf16_config_and_an_own_recipe_are_left_alone(patched):
    from megatron.core.quantization.quant_config import RecipeConfig

    patched("experts")
    assert _config().quant_recipe is None
    own = RecipeConfig.from_config_dict({"configs": {}, "matchers": {}})
    assert _config(fp8="hybrid", fp8_recipe="blockwise", quant_recipe=own).quant_recipe is own


def test_fp8_param_with_bf16_classes_is_refused_by_name(patched):
    patched("experts")
    with pytest.raises(
        ValueError, match="fp8_param keeps every TE weight in FP8; the BF16 module classes experts"
    ):
        _config(fp8="hybrid", fp8_recipe="blockwise", fp8_param=True)


def test_no_class_named_installs_nothing(patched):
    assert not patched("")
    assert _config(fp8="hybrid", fp8_recipe="blockwise").quant_recipe is None


@pytest.fixture
def moe_model(tmp_path):
    """A real 4-layer GPTModel on CPU: MoE layers with shared experts (layers 1-3) after one dense layer."""
    require("megatron.core")
    import torch.distributed as dist
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    cfg = _config(
        num_query_groups=2, kv_channels=16, normalization="RMSNorm", gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, num_moe_experts=4, moe_router_topk=2,
        moe_ffn_hidden_size=32, moe_shared_expert_intermediate_size=32, moe_layer_freq=[0, 1, 1, 1],
        moe_token_dispatcher_type="allgather", moe_router_load_balancing_type="none",
        first_last_layers_bf16=True, num_layers_at_start_in_bf16=0, num_layers_at_end_in_bf16=1,
    )  # fmt: skip
    spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm")
    try:
        yield GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=128, max_sequence_length=32)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _linears(model):
    import torch

    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Module) and n.endswith(("fc1", "fc2", "qkv", "proj"))
    ]


@pytest.mark.parametrize(
    "classes", [["experts"], ["attention"], ["dense_mlp"], ["shared_experts"], ["experts", "shared_experts"]]
)
def test_the_recipe_matches_exactly_the_named_classes_in_a_real_model(moe_model, classes):
    from megatron.core.quantization.quant_config import RecipeConfig
    from megatron.core.quantization.utils import get_quant_config_or_none

    recipe = RecipeConfig.from_config_dict(recipe_dict(classes))
    names = _linears(moe_model)
    bf16 = {n for n in names if get_quant_config_or_none(n, recipe) is not None}
    assert bf16 and bf16 == {n for n in names if module_class(n) in classes}
    assert all(get_quant_config_or_none(n, recipe).config_key == BF16_CONFIG for n in bf16)


def test_every_linear_of_a_decoder_layer_has_a_class(moe_model):
    classes = {n: module_class(n) for n in _linears(moe_model) if ".layers." in n}
    assert None not in classes.values(), classes
    assert set(classes.values()) == set(MODULE_GLOBS)
    assert classes["decoder.layers.0.mlp.linear_fc1"] == "dense_mlp"
    assert classes["decoder.layers.1.mlp.experts.local_experts.0.linear_fc1"] == "experts"
    assert classes["decoder.layers.1.mlp.shared_experts.linear_fc1"] == "shared_experts"


def test_te_report_groups_the_last_bf16_layer_as_first_last(moe_model):
    classes = te_classes(moe_model)
    assert classes["decoder.layers.3.self_attention.linear_qkv"] == "first_last"
    assert classes["decoder.layers.3.mlp.experts.local_experts.0.linear_fc2"] == "first_last"
    assert classes["decoder.layers.2.self_attention.linear_qkv"] == "attention"
    report = TEReport()
    report.attach([moe_model])
    assert report.planned == ["first_last"]  # no module_precision class named in this process's environment


def test_the_classes_cover_the_modules_the_layout_benchmark_measured():
    """bench_te_layout (docs/results.md#trainer-layer-cost) sent exactly these TE spec modules to BF16 with the
    same per-module config the patch builds; the patch's class globs match each of them to the same class."""
    from benchmarks.megatron.bench_te_layout import MODULE_CLASSES

    for cls, patterns in MODULE_CLASSES.items():
        for pattern in patterns:
            assert module_class("decoder.layers.7." + pattern.removeprefix("*.")) == cls, pattern
