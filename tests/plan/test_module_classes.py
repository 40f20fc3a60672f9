"""The per-rank computations over classes of engine modules (fp8spec.linear_classes) give exactly what the
module-by-module walk gave: the walk is kept here as the reference (the code before the class walk), and both run
on catalog models at every tp, ep, engine and several exclusion sets."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from fp8spec.catalog import get_model
from fp8spec.engines import get_engine
from fp8spec.linear_classes import engine_modules
from fp8spec.module_names import shape_pattern
from fp8spec.plan.weights import (
    BF16,
    FP8,
    FP32,
    Sharding,
    WeightBytes,
    _cdiv,
    _local_experts,
    _other_bytes,
    _rank_shape,
    padded_vocab_rows,
    rollout_weight_bytes,
)
from fp8spec.rules.blocks import misaligned_shards

# --- the module-by-module reference (fp8spec before the class walk) ---


def reference_weight_bytes(
    model, shard: Sharding, fp8_names: frozenset, vocab_padding: int, block: tuple[int, int]
) -> WeightBytes:
    bn, bk = block
    local_e = _local_experts(model, shard)
    fp8 = bf16 = scales = 0
    fused_fp8: dict[str, list[tuple[int, int]]] = {}
    for m in model.linear_modules():
        if m.kind == "lm_head":
            continue  # counted with the embeddings below (vocab-parallel, padded)
        if m.group == "experts" and m.expert is not None and m.expert >= local_e:
            continue  # another expert-parallel rank holds it (equal split; counts match per rank)
        out, inn = _rank_shape(m, model, shard)
        bias = out * BF16 if m.bias else 0
        if m.name in fp8_names:
            fp8 += out * inn * FP8
            bf16 += bias
            if m.kind == "mla_kv_b":  # MLA keeps a dequantized bf16 copy for its W_UK/W_UV bmm's
                bf16 += out * inn * BF16
            key = m.fused_name or m.name
            if m.group == "experts":
                key = f"{key}.{m.expert}.{'w13' if m.kind == 'expert_in' else 'w2'}"
            fused_fp8.setdefault(key, []).append((out, inn))
        else:
            bf16 += out * inn * BF16 + bias
    for key, shapes in fused_fp8.items():
        inn = shapes[0][1]
        if key.endswith(".w13"):  # vLLM sizes gate and up scales separately: 2 * ceil(I / 128)
            scales += sum(_cdiv(o, bn) for o, _ in shapes) * _cdiv(inn, bk) * FP32
        else:
            scales += _cdiv(sum(o for o, _ in shapes), bn) * _cdiv(inn, bk) * FP32
    rows = padded_vocab_rows(model.vocab_size, shard.tp, vocab_padding)
    tables = 1 if model.tie_word_embeddings else 2
    embeddings = rows * model.hidden_size * BF16 * tables
    return WeightBytes(fp8, scales, bf16, embeddings, _other_bytes(model))



def _reference_per_rank_out(module, model, tp: int) -> tuple[int, bool]:
    """Output rows of one rank, and whether the split is exact. K/V heads are replicated when tp > kv_heads."""
    suffix = module.name.rsplit(".", 1)[-1]
    if module.kind == "attn_qkv" and suffix in ("k_proj", "v_proj"):
        kv = model.num_key_value_heads
        heads = max(1, kv // tp) if tp > kv else kv // tp
        return heads * model.head_dim, (kv % tp == 0 or tp % kv == 0)
    return module.out_features // tp, module.out_features % tp == 0


def reference_misaligned(
    quantized, model, block, tp: int, ep: int, engine: str
) -> OrderedDict[tuple, list]:
    """Group the quantized modules whose per-rank shard is not on the block grid.

    Mirrors vLLM's validate_fp8_block_shape / validate_fp8_block_shape_moe
    (vllm/model_executor/layers/quantization/utils/fp8_utils.py) and SGLang's stricter
    Fp8LinearMethod.validate_block_quant_shapes, which checks every merged partition.
    Returns OrderedDict key -> (count, text).
    """
    block_n, block_k = block
    bad: "OrderedDict[tuple, list]" = OrderedDict()
    merged_groups: dict[str, list] = {}
    for m in quantized:
        experts = m.kind in ("expert_in", "expert_out")
        split = 1 if (experts and ep > 1) else tp
        if m.parallel == "replicated":
            continue
        if m.parallel == "row":
            if split > 1:
                per, exact = m.in_features // split, m.in_features % split == 0
                if not exact or per % block_k:
                    key = (shape_pattern(m.name), "in", m.in_features, split)
                    bad.setdefault(
                        key,
                        [
                            0,
                            f"in_features {m.in_features} / tp {split} = "
                            f"{m.in_features / split:g}, not a multiple of block {block_k}",
                        ],
                    )[0] += 1
            continue
        per, exact = _reference_per_rank_out(m, model, split)
        if m.group and split == 1 and engine == "vllm" and not experts:
            merged_groups.setdefault(m.fused_name or m.name, []).append((m, per))
            continue
        if split > 1 or m.group or engine == "sglang":
            if not exact or per % block_n:
                key = (shape_pattern(m.name), "out", m.out_features, split)
                bad.setdefault(
                    key,
                    [
                        0,
                        f"out_features {m.out_features} / tp {split} = "
                        f"{m.out_features / split:g}, not a multiple of block {block_n}",
                    ],
                )[0] += 1
    # vLLM lets the last partition of a merged layer be ragged when the layer is not TP-split.
    for members in merged_groups.values():
        for m, per in members[:-1]:
            if per % block_n:
                key = (shape_pattern(m.name), "out", m.out_features, 1)
                bad.setdefault(
                    key,
                    [
                        0,
                        f"out_features {m.out_features} is not a multiple of block {block_n} "
                        "inside a fused layer",
                    ],
                )[0] += 1
    return bad



MODELS = ["Qwen/Qwen3-30B-A3B-Base", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-8B-Base"]


def _quantized_sets(model) -> dict[str, frozenset[str]]:
    names = [m.name for m in model.linear_modules() if m.kind not in ("lm_head", "router")]
    return {
        "all": frozenset(names),
        "none": frozenset(),
        "layer 3 and every 5th expert kept": frozenset(
            n for n in names if ".layers.3." not in n and not n.endswith((".5.gate_proj", ".5.down_proj"))
        ),
        "q_proj only (split fused groups)": frozenset(n for n in names if n.endswith("q_proj")),
    }


@pytest.mark.parametrize("model_id", MODELS)
def test_weight_bytes_equal_the_module_walk(model_id):
    model = get_model(model_id)
    for label, quantized in _quantized_sets(model).items():
        for tp, ep in [(1, 1), (2, 1), (4, 1), (8, 1), (1, 8), (2, 4)]:
            got = rollout_weight_bytes(model, Sharding(tp, ep), quantized, vocab_padding=64)
            want = reference_weight_bytes(model, Sharding(tp, ep), quantized, 64, (128, 128))
            assert got == want, (label, tp, ep)


@pytest.mark.parametrize("model_id", MODELS)
def test_misaligned_shards_equal_the_module_walk(model_id):
    model = get_model(model_id)
    linears = [m for m in model.linear_modules() if m.kind != "lm_head"]
    for label, quantized in _quantized_sets(model).items():
        modules = [m for m in linears if m.name in quantized]
        classes = engine_modules(model, quantized)
        for engine in ("vllm", "sglang"):
            for tp, ep in [(1, 1), (2, 1), (3, 1), (4, 1), (8, 1), (16, 1), (4, 8)]:
                for block in ((128, 128), (96, 64)):
                    got = misaligned_shards(classes, model, block, tp, ep, get_engine(engine))
                    want = reference_misaligned(modules, model, block, tp, ep, engine)
                    assert list(got.items()) == list(want.items()), (label, engine, tp, ep, block)
