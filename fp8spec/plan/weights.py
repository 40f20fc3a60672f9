"""Rollout-engine weight bytes on one GPU, the way vLLM 0.24 allocates them.

BF16: every parameter 2 bytes. FP8 (W8A8 blockwise): each quantized linear 1 byte per weight plus fp32
block scales, ceil(out/128) x ceil(in/128) per (fused) linear and per expert; linears left out of
quantization (lm_head, router, linear.exclude, bf16 first/last layers), embeddings, norms and biases stay
BF16. Per-GPU shapes follow vLLM's tensor/expert parallel sharding (profile facts memory.*). MLA attention
also keeps a bf16 copy of an FP8 kv_b_proj (memory.mla_kv_b_copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Optional

from fp8spec.linear_classes import engine_modules

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts

BF16 = 2
FP8 = 1
FP32 = 4


@dataclass(frozen=True)
class Sharding:
    """How one engine replica splits the model: ``tp`` tensor parallel, ``ep`` expert parallel ranks."""

    tp: int = 1
    ep: int = 1


@dataclass(frozen=True)
class WeightBytes:
    fp8_linear: int = 0  # float8 weights of quantized linears
    fp8_scales: int = 0  # their fp32 block scales
    bf16_linear: int = 0  # linears kept in BF16 (lm_head, router, exclusions)
    embeddings: int = 0
    other: int = 0  # norms, biases, rotary cache

    @property
    def total(self) -> int:
        return self.fp8_linear + self.fp8_scales + self.bf16_linear + self.embeddings + self.other

    def as_dict(self) -> dict:
        return {
            "fp8_linear": self.fp8_linear,
            "fp8_block_scales": self.fp8_scales,
            "bf16_linear": self.bf16_linear,
            "embeddings": self.embeddings,
            "norms_biases_rotary": self.other,
            "total": self.total,
        }


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def padded_vocab_rows(vocab: int, tp: int, padding: int) -> int:
    """Rows of the vocab-parallel embedding / lm_head on one rank (vocab padded to ``padding``)."""
    return _cdiv(_cdiv(vocab, padding) * padding, tp)


def _rank_shape(m, model, shard: Sharding) -> tuple[int, int]:
    """(out, in) of linear ``m`` on one rank."""
    out, inn = m.out_features, m.in_features
    if m.group == "experts":
        if shard.ep > 1:  # whole experts per rank, not split by TP
            return out, inn
        return (out // shard.tp, inn) if m.parallel == "column" else (out, inn // shard.tp)
    if m.kind == "attn_qkv" and m.suffix in ("k_proj", "v_proj") and model.attention != "mla":
        # vLLM replicates KV heads when tp > kv heads: max(1, kv_heads // tp) heads per rank
        return max(1, model.num_key_value_heads // shard.tp) * model.head_dim, inn
    if m.parallel == "column":
        return _cdiv(out, shard.tp), inn
    if m.parallel == "row":
        return out, _cdiv(inn, shard.tp)
    return out, inn


def _local_experts(model, shard: Sharding) -> int:
    return _cdiv(model.num_experts, shard.ep) if shard.ep > 1 else model.num_experts


def rollout_weight_bytes(
    model: ModelFacts,
    shard: Sharding,
    quantized: Optional[Iterable[str]],
    *,
    vocab_padding: int,
    block: tuple[int, int] = (128, 128),
) -> WeightBytes:
    """Weight bytes of one GPU of a rollout replica. ``quantized`` names the FP8 linears (None: all BF16)."""
    # Cached: rules re-plan a spec for every candidate fix, mostly with the same weights.
    return _rollout_weight_bytes(model, shard, frozenset(quantized or ()), vocab_padding, tuple(block))


@lru_cache(maxsize=64)
def _rollout_weight_bytes(
    model, shard: Sharding, fp8_names: frozenset, vocab_padding: int, block: tuple[int, int]
) -> WeightBytes:
    bn, bk = block
    local_e = _local_experts(model, shard)
    fp8 = bf16 = scales = 0
    # Per class of engine module (fp8spec.linear_classes), times its count: the same sums as module by
    # module, in a time that does not grow with the number of experts.
    for cls, count in engine_modules(model, fp8_names):
        if cls.expert is not None and cls.expert >= local_e:
            continue  # another expert-parallel rank holds it (equal split; counts match per rank)
        shapes: list[tuple[int, int]] = []
        for m in cls.members:
            out, inn = _rank_shape(m, model, shard)
            bias = out * BF16 if m.bias else 0
            if m.quantized:
                fp8 += count * out * inn * FP8
                bf16 += count * bias
                if m.kind == "mla_kv_b":  # MLA keeps a dequantized bf16 copy for its W_UK/W_UV bmm's
                    bf16 += count * out * inn * BF16
                shapes.append((out, inn))
            else:
                bf16 += count * (out * inn * BF16 + bias)
        if not shapes:
            continue
        inn = shapes[0][1]
        if cls.expert is not None and cls.members[0].kind == "expert_in":
            # vLLM sizes gate and up scales separately: 2 * ceil(I / 128)
            scales += count * sum(_cdiv(o, bn) for o, _ in shapes) * _cdiv(inn, bk) * FP32
        else:
            scales += count * _cdiv(sum(o for o, _ in shapes), bn) * _cdiv(inn, bk) * FP32
    rows = padded_vocab_rows(model.vocab_size, shard.tp, vocab_padding)
    tables = 1 if model.tie_word_embeddings else 2
    embeddings = rows * model.hidden_size * BF16 * tables
    return WeightBytes(fp8, scales, bf16, embeddings, _other_bytes(model))


def largest_fp8_parameter(model: ModelFacts, shard: Sharding, quantized: Iterable[str]) -> int:
    """Elements of the largest FP8 weight tensor an engine allocates on one rank: a fused linear (qkv_proj,
    gate_up_proj) or one layer's routed experts stacked into one tensor (FusedMoE's w13 / w2)."""
    local_e = _local_experts(model, shard)
    largest = 0
    for cls, _count in engine_modules(model, frozenset(quantized)):
        if cls.expert is not None and cls.expert >= local_e:
            continue
        numel = 0
        for m in cls.members:
            if m.quantized:
                out, inn = _rank_shape(m, model, shard)
                numel += out * inn
        largest = max(largest, numel * local_e if cls.expert is not None else numel)
    return largest


@lru_cache(maxsize=8)
def _other_bytes(model) -> int:
    """Norms and router biases (replicated, BF16) plus vLLM's rotary cos/sin cache."""
    linear = sum(
        m.numel + (m.out_features if m.bias else 0)
        for m in model.linear_modules()
        if not (m.kind == "lm_head")
    )
    embeddings = model.vocab_size * model.hidden_size
    lm_head = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size
    rest = max(0, model.num_parameters() - linear - embeddings - lm_head)
    rotary_dim = model.qk_rope_head_dim if model.attention == "mla" else model.head_dim
    rotary = (model.max_position_embeddings or 0) * (rotary_dim or 0) * BF16
    return rest * BF16 + rotary
