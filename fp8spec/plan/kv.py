"""KV-cache arithmetic of vLLM 0.24 (profile facts memory.kv_page_size, memory.kv_capacity).

Per token and layer a GQA model stores K and V for its KV heads on this rank (max(1, kv_heads // tp)),
head_dim wide; an MLA model (DeepSeek) stores one compressed latent of kv_lora_rank + qk_rope_head_dim,
replicated on every TP rank. Pages hold ``block_size`` tokens of one layer; the pool is cut into whole
blocks across all layers, and vLLM reports capacity as max concurrency x max_model_len.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_bytes_per_token_layer(model: ModelFacts, tp: int, dtype_bytes: int) -> int:
    """Bytes of KV cache one token needs in one attention layer on one GPU."""
    if model.attention == "mla":
        assert (
            model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
        )  # set for every MLA model
        return (model.kv_lora_rank + model.qk_rope_head_dim) * dtype_bytes
    return 2 * max(1, model.num_key_value_heads // tp) * model.head_dim * dtype_bytes


@dataclass(frozen=True)
class KVCapacity:
    available_bytes: int
    bytes_per_token_layer: int
    layers: int
    block_size: int
    max_model_len: int
    num_blocks: int

    @property
    def bytes_per_token(self) -> int:
        return self.bytes_per_token_layer * self.layers

    @property
    def page_bytes(self) -> int:
        return self.bytes_per_token_layer * self.block_size

    @property
    def blocks_per_request(self) -> int:
        return _cdiv(self.max_model_len, self.block_size)

    @property
    def max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request"."""
        return self.num_blocks / self.blocks_per_request

    @property
    def tokens(self) -> int:
        """vLLM's "GPU KV cache size: N tokens" (kv_cache_utils.get_kv_cache_capacity)."""
        return int(self.max_concurrency * self.max_model_len)

    def concurrency_at(self, seq_len: int) -> float:
        """Sequences of ``seq_len`` tokens that fit at once."""
        return self.num_blocks / _cdiv(seq_len, self.block_size)

    @property
    def one_request_bytes(self) -> int:
        """KV bytes one request at max_model_len needs (vLLM refuses to start below it)."""
        return self.blocks_per_request * self.page_bytes * self.layers


def kv_capacity(
    available_bytes: int, bytes_per_token_layer: int, layers: int, block_size: int, max_model_len: int
) -> KVCapacity:
    page = bytes_per_token_layer * block_size
    blocks = max(0, available_bytes // page // layers) if available_bytes > 0 else 0
    return KVCapacity(available_bytes, bytes_per_token_layer, layers, block_size, max_model_len, blocks)
