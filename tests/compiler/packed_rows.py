"""A tiny Qwen3 and the check that a packed row (verl's padding removal: one row, per-sequence position ids, no
attention mask) gives each sequence the logits it gets alone, shared by the sdpa/eager and flex tests."""

from __future__ import annotations

import torch


def tiny_qwen3(attn: str, layers: int = 2, max_positions: int = 512):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=300,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=max_positions,
        attn_implementation=attn,
    )
    return Qwen3ForCausalLM(cfg).eval()


def assert_packed_row_keeps_sequences_apart(model, lens: list[int]) -> None:
    seqs = [torch.randint(0, 300, (n,)) for n in lens]
    ids = torch.cat(seqs)[None]
    with torch.no_grad():
        alone = [model(input_ids=s[None], use_cache=False).logits[0] for s in seqs]
        # as verl's FSDP engine calls it with padding removal on (use_cache False: a cache skips packing detection)
        pos = torch.cat([torch.arange(n) for n in lens])[None]
        packed = model(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False).logits[0]
        mixed = model(
            input_ids=ids, attention_mask=None, position_ids=torch.arange(sum(lens))[None], use_cache=False
        ).logits[0]
    for a, b in zip(alone, packed.split(lens)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # the check has teeth: contiguous position ids let the sequences attend to each other
    assert max(float((a - b).abs().max()) for a, b in zip(alone[1:], mixed.split(lens)[1:])) > 0.1
