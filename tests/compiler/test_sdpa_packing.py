"""training.attention sdpa / eager on the FSDP trainer keeps verl's padding removal on.

The fact it rests on (backends/verl/0.9.1.yaml key.model_use_remove_padding, package.packed_sequence_masks): verl's
FSDP engine hands the model one packed row with attention_mask None and per-sequence position ids, and transformers
(>= 4.54) masks across the packed sequences for sdpa and eager. The first test runs the installed transformers on a
tiny Qwen3 (the check has teeth: contiguous position ids mix the sequences); the second reads verl's own engine
source for the inputs it passes; the last two check what the bundle says and what its preflight requires.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch

from tests.compiler.packed_rows import assert_packed_row_keeps_sequences_apart, tiny_qwen3
from tests.conformance.checks import compile_variant
from tests.conftest import SPECS, require

transformers = require("transformers")


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_a_packed_row_gives_each_sequence_its_own_logits(impl):
    assert_packed_row_keeps_sequences_apart(tiny_qwen3(impl), [37, 5, 64])


def test_verls_engine_passes_the_packed_row_without_a_mask():
    require("verl")
    from verl.workers.engine.fsdp import transformer_impl

    src = inspect.getsource(transformer_impl)
    branch = src[src.index("if use_remove_padding:", src.index("def prepare_model_inputs")) :]
    branch = branch[: branch.index("else:\n            if pad_mode")]
    assert '"attention_mask": None,' in branch and '"position_ids": position_ids_rmpad,' in branch


@pytest.fixture(scope="module")
def sdpa_bundle(tmp_path_factory):
    return compile_variant(SPECS / "tiny-qwen3-h200.yaml", "fsdp+vllm", {}, tmp_path_factory.mktemp("sdpa"))


def test_the_bundle_sets_sdpa_and_leaves_padding_removal_on(sdpa_bundle):
    assert sdpa_bundle.spec.training.attention == "sdpa"
    overrides = sdpa_bundle.files["overrides.yaml"]
    assert "attn_implementation" in overrides and "sdpa" in overrides
    assert "use_remove_padding" not in overrides


def test_the_preflight_requires_transformers_with_packed_masks(sdpa_bundle):
    packages = {p["name"]: p for p in json.loads(sdpa_bundle.files["preflight.json"])["packages"]}
    assert packages["transformers"]["version"] == ">=4.54.0"
    assert "flash-attn" not in packages


def test_sdpa_gets_a_dense_mask_over_the_whole_packed_row(monkeypatch):
    """Rule PAR016's premise: a packed row reaches sdpa with one boolean mask over all of its tokens, so the
    kernel's work grows with the square of the row's length, not of each sequence's."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=300,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        attn_implementation="sdpa",
    )
    model = Qwen3ForCausalLM(cfg).eval()
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        seen.append(
            (tuple(q.shape), None if attn_mask is None else tuple(attn_mask.shape), kw.get("is_causal"))
        )
        return real(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    lens = [37, 5, 64]
    ids = torch.randint(0, 300, (1, sum(lens)))
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    with torch.no_grad():
        model(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False)
        model(
            input_ids=ids[:, :64], attention_mask=None, position_ids=torch.arange(64)[None], use_cache=False
        )
    (packed_q, packed_mask, _), (one_q, one_mask, one_causal) = seen
    assert (
        packed_q[-2] == sum(lens) and packed_mask is not None and packed_mask[-2:] == (sum(lens), sum(lens))
    )
    # one sequence alone: no mask at all, the causal kernel path
    assert one_mask is None and one_causal
