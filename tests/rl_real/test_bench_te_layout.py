"""`python -m benchmarks.megatron.bench_te_layout`'s CPU side: the RL length sampler, verl-style packing into THD
micro-batches, the layout table and its per-module quantization config, and a clean exit without the GPU stack."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, require

MODULE = "benchmarks.megatron.bench_te_layout"


@pytest.fixture(scope="module")
def bench():
    return importlib.import_module("benchmarks.megatron.bench_te_layout")  # the module `python -m` runs


def test_rl_lengths_are_deterministic_and_within_bounds(bench):
    pairs = bench.sample_rl_lengths(256, seed=0)
    assert pairs == bench.sample_rl_lengths(256, seed=0)
    assert pairs != bench.sample_rl_lengths(256, seed=1)
    assert all(128 <= p <= 2048 and 1024 <= p + r <= 8192 for p, r in pairs)
    totals = sorted(p + r for p, r in pairs)
    assert 2500 < totals[len(totals) // 2] < 4500  # an RL-like spread, not a constant
    assert totals[0] < 1500 and totals[-1] > 7000


def test_micro_batches_cover_every_sequence_once_and_respect_the_token_cap(bench):
    lengths = [p + r for p, r in bench.sample_rl_lengths(64, seed=0)]
    parts = bench.balanced_micro_batches(lengths, 22528)
    assert sorted(i for part in parts for i in part) == list(range(64))
    sums = [sum(lengths[i] for i in part) for part in parts]
    assert max(sums) <= 22528
    assert len(parts) == -(-sum(lengths) // 22528)  # verl's count: ceil(tokens / max_token_len)
    with pytest.raises(ValueError, match="exceeds max_token_len"):
        bench.balanced_micro_batches([30000], 22528)


def test_packed_batches_are_16k_to_24k_tokens_in_verl_thd_layout(bench):
    plan = bench.plan_batches(
        seed=0, mini_batch_seqs=64, max_token_len=22528, micro_batches=4, single_len=22528
    )
    assert len(plan["packed"]) == 4 and len(plan["single"]) == 4
    for b in plan["packed"]:
        assert 16384 <= b["tokens"] <= 22528 and len(b["seqlens"]) > 1
        assert all(p % 16 == 0 and p >= n for p, n in zip(b["padded"], b["seqlens"]))
        assert b["total"] % 128 == 0 and b["total"] - b["tokens"] < 16 * len(b["seqlens"]) + 128
        cu = b["cu_seqlens"]
        assert cu[0] == 0 and cu[-1] == b["total"] and all(a < c for a, c in zip(cu, cu[1:]))
        assert b["max_seqlen"] == max(c - a for a, c in zip(cu, cu[1:]))
    assert plan["single"][0] == {"seqlens": [22528], "tokens": 22528, "total": 22528}


def test_thd_layout_pads_each_sequence_and_the_pack(bench):
    b = bench.thd_layout([1000, 17, 2048])
    assert b["padded"][:2] == [1008, 32] and b["padded"][2] % 16 == 0
    assert b["total"] == 3200 and b["cu_seqlens"] == [0, 1008, 1040, 3200] and b["tokens"] == 3065


def test_the_layout_table(bench):
    names = [lay.name for lay in bench.LAYOUTS]
    assert len(names) == len(set(names))
    moe = {lay.name for lay in bench.layouts_for(True)}
    dense = {lay.name for lay in bench.layouts_for(False)}
    want = {"bf16", "fp8", "fp8-attn-bf16", "fp8-firstlast-bf16", "fp8-tensorwise"}
    assert want <= moe and want <= dense
    assert {"fp8-experts-bf16", "fp8-opfuser", "bf16-opfuser"} <= moe and not {"fp8-experts-bf16"} & dense
    assert "fp8-mlp-bf16" in dense and "fp8-mlp-bf16" not in moe
    assert all(lay.mechanism for lay in bench.LAYOUTS)
    assert bench.LAYOUT_BY_NAME["fp8"].recipe == "blockwise"  # the recipe the FP8 bundles compile
    assert bench.LAYOUT_BY_NAME["bf16"].recipe is None and bench.LAYOUT_BY_NAME["bf16-opfuser"].recipe is None


def test_quant_recipe_matches_only_its_module_class(bench):
    recipe = bench.quant_recipe_dict(("experts",))
    assert bench.quant_recipe_dict(()) is None
    config = recipe["configs"]["bf16"]
    assert config == {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": {}}
    patterns = [m["pattern"] for m in recipe["matchers"].values()]
    assert all(
        m["enabled"] and m["type"] == "glob" and m["config"] == "bf16" for m in recipe["matchers"].values()
    )

    def matched(name):
        return any(fnmatch.fnmatch(name, p) for p in patterns)

    assert matched("decoder.layers.0.mlp.experts.linear_fc1") and matched(
        "decoder.layers.47.mlp.experts.linear_fc2"
    )
    assert not matched("decoder.layers.0.mlp.experts")  # TEGroupedMLP itself takes no quant config
    assert not matched("decoder.layers.0.self_attention.linear_qkv") and not matched(
        "decoder.layers.0.mlp.linear_fc1"
    )
    assert bench.module_class("decoder.layers.1.mlp.experts.linear_fc1") == "experts"
    assert bench.module_class("decoder.layers.1.mlp.linear_fc2") == "dense_mlp"
    assert bench.module_class("decoder.layers.1.self_attention.linear_proj") == "attention"
    assert bench.module_class("decoder.layers.1.self_attention.core_attention") is None
    assert bench.module_class("output_layer") is None


def test_megatron_reads_the_quant_recipe_where_it_is_installed(bench):
    qc = require("megatron.core.quantization.quant_config")
    rc = qc.RecipeConfig.from_config_dict(bench.quant_recipe_dict(("attention",)))
    hit = rc.match(qc.MatchContext(module_path="decoder.layers.3.self_attention.linear_proj", layer_number=3))
    assert hit is not None and hit.config_key == "bf16"
    assert (
        rc.match(qc.MatchContext(module_path="decoder.layers.3.mlp.experts.linear_fc1", layer_number=3))
        is None
    )


def test_shapes_come_from_the_catalog_and_agree_with_the_one_layer_bench(bench):
    moe, dense = bench.model_shape("qwen3-30b-a3b"), bench.model_shape("qwen3-8b")
    assert (moe["hidden"], moe["heads"], moe["kv_heads"], moe["head_dim"]) == (2048, 32, 4, 128)
    assert (moe["experts"], moe["topk"], moe["moe_ffn"], moe["model_layers"]) == (128, 8, 768, 48)
    assert (dense["hidden"], dense["heads"], dense["kv_heads"], dense["ffn"], dense["experts"]) == (
        4096,
        32,
        8,
        12288,
        0,
    )
    # the one-layer bench imports torch at its top: its SHAPES are read from its source, not imported
    tree = ast.parse((REPO / "benchmarks/megatron/bench_te_layer.py").read_text(encoding="utf-8"))
    (shapes,) = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", None) == "SHAPES" for t in n.targets)]
    for name, shape in (("qwen3-30b-a3b", moe), ("qwen3-8b", dense)):
        keys = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "experts", "topk")
        assert {k: shapes[name][k] for k in keys} == {k: shape[k] for k in keys}, name


def test_rotated_order_permutes_and_moves_cases(bench):
    cases = list(range(20))
    orders = [bench.rotated_order(cases, r) for r in range(5)]
    assert all(sorted(o) == cases for o in orders)
    assert len({o[0] for o in orders}) == 5  # a different case first in each repetition
    assert bench.rotated_order([], 3) == []


def test_summaries(bench):
    assert bench.summarize([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    rows = [
        {
            "model": "m",
            "batch": "packed",
            "layout": "bf16",
            "error": None,
            "tok_s_summary": bench.summarize([10.0]),
            "peak_gib": 1.0,
            "fp8_modules": {"attention": [0, 8]},
        },
        {"model": "m", "batch": "packed", "layout": "fp8", "error": "RuntimeError: x"},
    ]
    table = bench.markdown_table(rows)
    assert "| m | packed | bf16 | 10 |" in table and "attention 0/8" in table and "RuntimeError: x" in table


def test_plan_runs_without_gpu_and_a_run_without_the_stack_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--plan"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert len(plan["batches"]["packed"]) == 4 and plan["quant_recipes"]["fp8"] is None
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--out", str(tmp_path / "o"), "--models", "qwen3-8b"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode == 0:
        pytest.skip("this machine has the GPU stack")
    assert proc.returncode == 2
    assert "needs a CUDA GPU with TransformerEngine" in proc.stderr
    assert not (tmp_path / "o").exists()
