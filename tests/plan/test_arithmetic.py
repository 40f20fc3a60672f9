"""The planner's exact arithmetic: KV bytes per token, block rounding, vLLM's capacity lines, weight bytes."""

from __future__ import annotations

import pytest

from fp8spec.catalog import get_model
from fp8spec.plan.kv import kv_bytes_per_token_layer, kv_capacity
from fp8spec.plan.weights import Sharding, padded_vocab_rows, rollout_weight_bytes

GIB = 1 << 30


@pytest.mark.parametrize("model_id, tp, dtype_bytes, expected", [
    ("Qwen/Qwen3-8B", 1, 2, 2 * 8 * 128 * 2),  # K and V, 8 KV heads, head_dim 128, bf16
    ("Qwen/Qwen3-8B", 2, 2, 2 * 4 * 128 * 2),
    ("Qwen/Qwen3-8B", 1, 1, 2 * 8 * 128),  # fp8
    ("Qwen/Qwen3-30B-A3B", 1, 2, 2 * 4 * 128 * 2),
    ("Qwen/Qwen3-30B-A3B", 8, 2, 2 * 1 * 128 * 2),  # 4 KV heads at TP 8: one head per rank, replicated
    ("deepseek-ai/DeepSeek-V3", 1, 2, (512 + 64) * 2),  # MLA: one latent, no factor 2
    ("deepseek-ai/DeepSeek-V3", 8, 1, 512 + 64),  # replicated on every TP rank
])
def test_kv_bytes_per_token_and_layer(model_id, tp, dtype_bytes, expected):
    assert kv_bytes_per_token_layer(get_model(model_id), tp, dtype_bytes) == expected


def test_capacity_lines_match_a_real_vllm_log():
    """A public vLLM start-up log (LMCache issue #3430: Qwen3-8B BF16, 'Available KV cache memory: 6.37 GiB',
    'GPU KV cache size: 46,368 tokens', 'Maximum concurrency for 16,384 tokens per request: 2.83x')."""
    model = get_model("Qwen/Qwen3-8B")
    per_layer = kv_bytes_per_token_layer(model, 1, 2)
    available = int(6.368 * GIB)  # the log rounds to 0.01 GiB; 2898 blocks need 6.3677-6.3699 GiB
    assert f"{available / GIB:.2f}" == "6.37"
    kv = kv_capacity(available, per_layer, model.num_hidden_layers, 16, 16384)
    assert kv.tokens == 46_368
    assert f"{kv.max_concurrency:.2f}" == "2.83"
    assert kv.bytes_per_token == 147_456


def test_capacity_rounds_to_whole_blocks_of_all_layers():
    page = 16 * 100  # 100 bytes per token and layer
    kv = kv_capacity(page * 10 * 3 - 1, 100, 10, 16, 64)  # one byte short of 3 blocks of 10 layers
    assert kv.num_blocks == 2 and kv.tokens == 32
    assert kv_capacity(0, 100, 10, 16, 64).num_blocks == 0
    assert kv_capacity(-5, 100, 10, 16, 64).tokens == 0
    assert kv.concurrency_at(17) == 1.0  # 17 tokens need 2 blocks
    assert kv.one_request_bytes == 4 * page * 10


def test_bf16_weights_are_two_bytes_per_parameter_plus_the_rotary_cache():
    model = get_model("Qwen/Qwen3-8B")
    w = rollout_weight_bytes(model, Sharding(), None, vocab_padding=64)
    rotary = 40960 * 128 * 2
    assert w.total == model.num_parameters() * 2 + rotary
    assert w.fp8_linear == 0 and w.fp8_scales == 0


def test_fp8_weights_and_block_scales_of_qwen3_8b():
    model = get_model("Qwen/Qwen3-8B")
    quantized = [m.name for m in model.linear_modules() if m.kind != "lm_head"]
    w = rollout_weight_bytes(model, Sharding(), quantized, vocab_padding=64)
    per_layer = 4096 * 4096 * 2 + 1024 * 4096 * 2 + 12288 * 4096 * 3  # q, o, k, v, gate, up, down
    assert w.fp8_linear == 36 * per_layer == 6_945_767_424
    # fused qkv: ceil(6144/128) x 32; o: 32 x 32; fused gate_up: 192 x 32; down: 32 x 96 -- fp32 each
    assert w.fp8_scales == 36 * (48 * 32 + 32 * 32 + 192 * 32 + 32 * 96) * 4
    assert w.embeddings == 2 * 151936 * 4096 * 2  # embed_tokens and lm_head stay bf16
    assert w.bf16_linear == 0


def test_tensor_and_expert_parallel_shards():
    model = get_model("Qwen/Qwen3-30B-A3B")
    full = rollout_weight_bytes(model, Sharding(1, 1), None, vocab_padding=64)
    tp2 = rollout_weight_bytes(model, Sharding(2, 1), None, vocab_padding=64)
    ep8 = rollout_weight_bytes(model, Sharding(1, 8), None, vocab_padding=64)
    experts = 48 * 128 * 3 * 768 * 2048 * 2
    assert full.bf16_linear - tp2.bf16_linear > experts // 2 - 1  # experts split by TP without EP
    assert full.bf16_linear - ep8.bf16_linear == experts - experts // 8  # whole experts, 16 per rank
    assert tp2.embeddings == 2 * padded_vocab_rows(151936, 2, 64) * 2048 * 2


def test_moe_fp8_scales_follow_vllm_per_expert_shapes():
    model = get_model("Qwen/Qwen3-30B-A3B")
    quantized = [m.name for m in model.linear_modules() if m.group == "experts"]
    w = rollout_weight_bytes(model, Sharding(), quantized, vocab_padding=64)
    # w13 [E, 2*ceil(768/128), ceil(2048/128)], w2 [E, ceil(2048/128), ceil(768/128)] per MoE layer, fp32
    assert w.fp8_scales == 48 * 128 * (2 * 6 * 16 + 16 * 6) * 4
    assert w.fp8_linear == 48 * 128 * 3 * 768 * 2048
