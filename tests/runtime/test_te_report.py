"""te_report: the runtime's record of which modules ran FP8 in the Megatron actor.

On CPU: the module classification runs on a real megatron-core GPTModel (built on CPU, local layer spec, MoE),
and the log line is built from hooks fired by real forwards and backwards. The TransformerEngine side (modules
with fp8 set by TE's autocast, their quantizers) needs TE and a GPU: test_te_report_gpu runs it there and is
skipped here; the H200 RL run's logs show it in a real verl Megatron run (docs/results.md#rl-runs).
"""

from __future__ import annotations

import pytest
import torch

from fp8spec.runtime.trainer.te_report import TEReport, bf16_kind
from tests.conftest import require


@pytest.fixture
def gpt_model(tmp_path):
    require("megatron.core")
    import torch.distributed as dist
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    cfg = TransformerConfig(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=16,
        normalization="RMSNorm",
        qk_layernorm=True,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        num_moe_experts=4,
        moe_router_topk=2,
        moe_ffn_hidden_size=32,
        moe_token_dispatcher_type="allgather",
        moe_router_load_balancing_type="none",
        use_cpu_initialization=True,
    )
    spec = get_gpt_layer_local_spec(num_experts=4, qk_layernorm=True, normalization="RMSNorm")
    try:
        yield GPTModel(
            config=cfg,
            transformer_layer_spec=spec,
            vocab_size=128,
            max_sequence_length=32,
            position_embedding_type="rope",
        )
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def test_megatron_bf16_kinds_counted_once_each(gpt_model):
    report = TEReport()
    assert report.attach([gpt_model]) == 0  # the local spec has no TransformerEngine module
    # 2 layers: one router each; per layer input, q, k and pre-MLP norms plus the final norm; the word embedding
    # (its LanguageModelEmbedding wrapper owns no weight) and the output layer
    assert dict(report.bf16_modules) == {"router": 2, "norm": 9, "embedding": 1, "output_layer": 1}


def test_line_reports_fp8_calls_and_bf16_modules():
    class Router(torch.nn.Linear):  # the name decides its kind, as Megatron's TopKRouter
        pass

    report = TEReport()
    router = Router(4, 4)
    report.attach([torch.nn.ModuleDict({"router": router})])
    router(torch.ones(2, 4)).sum().backward()
    line = report.line("update")
    assert "fwd FP8 0/0 TE module calls (none)" in line
    assert "BF16 kept: router x1 (under FP8 autocast 0)" in line
    assert "weights router:float32" in line
    report.reset()
    assert "BF16 kept: none seen" in report.line("old_log_prob")


def test_bf16_kind_needs_an_own_weight():
    assert bf16_kind("decoder.final_layernorm", torch.nn.LayerNorm(4)) == "norm"
    assert bf16_kind("embedding", torch.nn.Module()) is None
    assert bf16_kind("output_layer", torch.nn.Linear(2, 2)) == "output_layer"
    assert bf16_kind("decoder.layers.0.mlp.linear_fc1", torch.nn.Linear(2, 2)) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="TransformerEngine needs a GPU")
def test_te_report_gpu():
    te = pytest.importorskip("transformer_engine.pytorch")
    from transformer_engine.common.recipe import Float8BlockScaling, Format

    lin = te.Linear(256, 256, params_dtype=torch.bfloat16).cuda()
    report = TEReport()
    assert report.attach([lin]) == 1
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with te.autocast(enabled=True, recipe=Float8BlockScaling(fp8_format=Format.HYBRID)):
        y = lin(x)
    y.float().sum().backward()
    line = report.line("update")
    assert "fwd FP8 1/1 TE module calls (Linear x1)" in line, line
    assert "Float8BlockScaling(HYBRID)" in line, line
    assert "E4M3" in line and "bwd FP8 1 calls" in line and "E5M2" in line, line


class TransformerEngineBaseModule(torch.nn.Linear):
    """A module te_report counts as TransformerEngine's (by its class name); ``fp8`` is what TE would set."""

    def __init__(self, fp8: bool):
        super().__init__(2, 2)
        self.fp8 = fp8


def _layer_model(fp8_by_name: dict[str, bool]) -> torch.nn.Module:
    root = torch.nn.Module()
    for name, fp8 in fp8_by_name.items():
        parent = root
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(leaf, TransformerEngineBaseModule(fp8))
    return root


def test_line_counts_fp8_calls_per_module_class_next_to_the_planned_bf16_classes(monkeypatch):
    monkeypatch.setenv("FP8SPEC_BF16_MODULES", "experts")
    modules = {
        "decoder.layers.0.self_attention.linear_qkv": True,
        "decoder.layers.0.self_attention.core_attention": True,
        "decoder.layers.0.mlp.experts.linear_fc1": False,
        "decoder.layers.0.mlp.experts.linear_fc2": False,
        "decoder.layers.0.mlp.shared_experts.linear_fc1": True,
    }
    model = _layer_model(modules)
    report = TEReport()
    assert report.attach([model]) == 5
    for name in modules:
        model.get_submodule(name)(torch.ones(1, 2))
    line = report.line("update")
    assert (
        "; by class attention 1/1, core_attention 1/1, experts 0/2, shared_experts 1/1; planned BF16 experts;"
        in line
    )


def test_line_without_a_layout_plans_no_bf16_class(monkeypatch):
    monkeypatch.delenv("FP8SPEC_BF16_MODULES", raising=False)
    model = _layer_model({"decoder.layers.0.mlp.linear_fc1": True})
    report = TEReport()
    report.attach([model])
    model.get_submodule("decoder.layers.0.mlp.linear_fc1")(torch.ones(1, 2))
    assert "; by class dense_mlp 1/1; planned BF16 none;" in report.line("old_log_prob")
