"""training.attention flex_attention on the FSDP trainer: verl's packed row is attended per sequence through a
block-sparse mask (backends/verl/0.9.1.yaml package.packed_sequence_masks).

The model tests run the installed transformers on a tiny Qwen3 with PyTorch's FlexAttention on CPU, forward only
(torch has no FlexAttention backward on CPU): a packed row gives each sequence its own logits, and the mask that
reaches flex_attention admits exactly the pairs inside each sequence and skips the blocks between them, unlike
sdpa's one dense mask over the row (tests/compiler/test_sdpa_packing.py). transformers compiles flex_attention
with torch.compile on first use, so these take tens of seconds. What a GPU training step costs with it (compile
time, the backward kernels, recompiles as lengths change) is not measured here.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.compiler.packed_rows import assert_packed_row_keeps_sequences_apart, tiny_qwen3
from tests.conformance.checks import compile_variant
from tests.conftest import SPECS, require

transformers = require("transformers")

pytestmark = pytest.mark.slow  # torch.compile of FlexAttention on CPU


def _model(layers: int = 2):
    return tiny_qwen3("flex_attention", layers, max_positions=2048)


def _packed(lens: list[int]):
    ids = torch.randint(0, 300, (1, sum(lens)))
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    return ids, pos


def test_a_packed_row_gives_each_sequence_its_own_logits():
    assert_packed_row_keeps_sequences_apart(_model(), [37, 5, 64])


def test_flex_gets_a_block_sparse_mask_of_the_sequences(monkeypatch):
    """The mask is a BlockMask over the row whose mask admits exactly the causal pairs inside each sequence, and
    whose blocks between sequences are skipped: attention work follows the sequences, not the row."""
    import transformers.integrations.flex_attention as integration

    model = _model(layers=1)
    seen = []
    real = integration.compile_friendly_flex_attention

    def spy(query, key, value, training=False, **kw):
        seen.append((tuple(query.shape), kw.get("block_mask")))
        return real(query, key, value, training=training, **kw)

    monkeypatch.setattr(integration, "compile_friendly_flex_attention", spy)
    lens = [700, 300, 1000, 524, 900, 672]  # 4,096 tokens, boundaries off the 128-token blocks
    ids, pos = _packed(lens)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False)
    (q_shape, block_mask), = seen
    total = sum(lens)
    assert q_shape[-2] == total and block_mask is not None
    assert block_mask.shape[-2:] == (total, total)
    dense = block_mask.to_dense()  # one entry per 128 x 128 block that is computed (partly or fully)
    blocks = -(-total // 128)
    assert dense.shape[-2:] == (blocks, blocks)
    computed = int(dense.sum())
    # at most the causal blocks of each sequence's own span of blocks; sdpa's kernel reads all blocks x blocks
    starts = [sum(lens[:i]) for i in range(len(lens))]
    spans = [(s + n - 1) // 128 - s // 128 + 1 for s, n in zip(starts, lens)]
    assert computed <= sum(k * (k + 1) // 2 for k in spans), (computed, spans)
    assert computed < 0.2 * blocks * blocks, (computed, blocks)
    # the mask function itself: exactly the causal pairs inside each sequence
    doc = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))
    q = torch.arange(total)[:, None]
    kv = torch.arange(total)[None, :]
    allowed = block_mask.mask_mod(torch.tensor(0), torch.tensor(0), q, kv)
    expected = (doc[:, None] == doc[None, :]) & (kv <= q)
    assert torch.equal(allowed.bool(), expected)
    assert int(allowed.sum()) == sum(n * (n + 1) // 2 for n in lens)


@pytest.fixture(scope="module")
def flex_bundle(tmp_path_factory):
    return compile_variant(
        SPECS / "tiny-qwen3-h200.yaml",
        "fsdp+vllm",
        {"training": {"attention": "flex_attention"}, "algorithm": {"ppo_max_token_len_per_gpu": 16384}},
        tmp_path_factory.mktemp("flex"),
    )


def test_the_bundle_sets_flex_and_leaves_padding_removal_on(flex_bundle):
    overrides = flex_bundle.files["overrides.yaml"]
    assert "+actor_rollout_ref.model.override_config.attn_implementation='flex_attention'" in overrides
    assert "use_remove_padding" not in overrides
    packages = {p["name"]: p for p in json.loads(flex_bundle.files["preflight.json"])["packages"]}
    assert packages["transformers"]["version"] == ">=4.54.0" and "flash-attn" not in packages
    # packed micro-batches are no dense-mask warning under flex (rule PAR016 is about sdpa and eager)
    assert "PAR016" not in [d.code for d in flex_bundle.validation.diagnostics]
