"""The models the field RL-trains: cited numbers, names the FP8 exclusions need, per-architecture facts.

Numbers are the ones each entry's ``source`` cites (model cards, config.json copies, slime/Megatron launch
scripts), written here by hand; tests/catalog/test_catalog_entries_vs_transformers.py checks the module
names and shapes against transformers itself.
"""

from __future__ import annotations

import pytest

from fp8spec.catalog import LINEAR_KINDS, PARALLEL_STYLES, catalog_ids, get_model

_ORIGINAL = {  # cited in test_catalog_models.py EXPECTED
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-8B-Base",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-30B-A3B-Base",
    "Qwen/Qwen2.5-7B",
    "Qwen/Qwen2.5-7B-Instruct",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "deepseek-ai/DeepSeek-V3",
}


def _qwen3(hidden, inter, layers, heads, tied):
    return {
        "architecture": "Qwen3ForCausalLM",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": tied,
        "qk_norm": True,
        "is_moe": False,
    }


_LLAMA70 = {
    "architecture": "LlamaForCausalLM",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "qk_norm": False,
    "max_position_embeddings": 131072,
}
_MIXTRAL_8X7B = {
    "architecture": "MixtralForCausalLM",
    "hidden_size": 4096,
    "moe_intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "qk_norm": False,
    "moe_layers": tuple(range(32)),
    "moe_block": "block_sparse_moe",
    "expert_names": ("w1", "w3", "w2"),
}
_GEMMA3_MM = {
    "architecture": "Gemma3ForConditionalGeneration",
    "model_type": "gemma3",
    "vocab_size": 262208,
    "tie_word_embeddings": True,
    "qk_norm": True,
    "sliding_window": 1024,
    "module_prefix": "language_model.model.",
    "lm_head_name": "language_model.lm_head",
}
FIELD = {
    "Qwen/Qwen3-0.6B": _qwen3(1024, 3072, 28, 16, True),
    "Qwen/Qwen3-1.7B": _qwen3(2048, 6144, 28, 16, True),
    "Qwen/Qwen3-4B": _qwen3(2560, 9728, 36, 32, True),
    "Qwen/Qwen3-14B": _qwen3(5120, 17408, 40, 40, False),
    "Qwen/Qwen3-32B": _qwen3(5120, 25600, 64, 64, False),
    "Qwen/Qwen3-235B-A22B": {
        "architecture": "Qwen3MoeForCausalLM",
        "hidden_size": 4096,
        "moe_intermediate_size": 1536,
        "num_hidden_layers": 94,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_layers": tuple(range(94)),
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "qk_norm": True,
    },
    "meta-llama/Llama-3.1-70B": _LLAMA70,
    "meta-llama/Llama-3.1-70B-Instruct": _LLAMA70,
    "meta-llama/Llama-3.3-70B-Instruct": _LLAMA70,
    "mistralai/Mixtral-8x7B-v0.1": _MIXTRAL_8X7B,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": _MIXTRAL_8X7B,
    "mistralai/Mixtral-8x22B-v0.1": dict(
        _MIXTRAL_8X7B,
        hidden_size=6144,
        moe_intermediate_size=16384,
        num_hidden_layers=56,
        num_attention_heads=48,
        moe_layers=tuple(range(56)),
        max_position_embeddings=65536,
    ),
    "google/gemma-3-1b-it": {
        "architecture": "Gemma3ForCausalLM",
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "qk_norm": True,
        "sliding_window": 512,
        "vision": None,
    },
    "google/gemma-3-4b-it": dict(
        _GEMMA3_MM,
        hidden_size=2560,
        intermediate_size=10240,
        num_hidden_layers=34,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
    ),
    "google/gemma-3-12b-it": dict(
        _GEMMA3_MM,
        hidden_size=3840,
        intermediate_size=15360,
        num_hidden_layers=48,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=256,
    ),
    "google/gemma-3-27b-it": dict(
        _GEMMA3_MM,
        hidden_size=5376,
        intermediate_size=21504,
        num_hidden_layers=62,
        num_attention_heads=32,
        num_key_value_heads=16,
        head_dim=128,
    ),
    "zai-org/GLM-4.5-Air": {
        "architecture": "Glm4MoeForCausalLM",
        "hidden_size": 4096,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 1408,
        "num_shared_experts": 1,
        "num_hidden_layers": 46,
        "num_attention_heads": 96,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "first_k_dense_layers": 1,
        "moe_layers": tuple(range(1, 46)),
        "vocab_size": 151552,
        "qkv_bias": True,
        "o_proj_bias": False,
        "qk_norm": False,
        "router_bias": True,
        "num_mtp_layers": 0,
    },
    "deepseek-ai/DeepSeek-V2-Lite": {
        "architecture": "DeepseekV2ForCausalLM",
        "attention": "mla",
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 2816,
        "num_shared_experts": 2,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "head_dim": 192,
        "num_experts": 64,
        "num_experts_per_tok": 6,
        "first_k_dense_layers": 1,
        "vocab_size": 102400,
        "qk_norm": False,
        "router_bias": False,
    },
}


def test_every_entry_has_cited_numbers():
    assert set(FIELD) | _ORIGINAL == set(catalog_ids())


@pytest.mark.parametrize("model_id", sorted(FIELD))
def test_cited_numbers(model_id):
    facts = get_model(model_id)
    for key, want in FIELD[model_id].items():
        assert getattr(facts, key) == want, f"{model_id}.{key}"


@pytest.mark.parametrize(
    "model_id, billions, tol",
    [
        ("Qwen/Qwen3-0.6B", 0.60, 0.01),  # model card: 0.6B (0.44B non-embedding), tied
        ("Qwen/Qwen3-1.7B", 1.72, 0.01),  # model card: 1.7B
        ("Qwen/Qwen3-4B", 4.02, 0.01),  # model card: 4.0B
        ("Qwen/Qwen3-14B", 14.77, 0.01),  # model card: 14.8B
        ("Qwen/Qwen3-32B", 32.76, 0.01),  # model card: 32.8B
        ("Qwen/Qwen3-235B-A22B", 235.1, 0.2),  # model card: 235B
        ("meta-llama/Llama-3.1-70B", 70.55, 0.01),  # HF: 70.6B
        ("mistralai/Mixtral-8x7B-v0.1", 46.70, 0.01),  # Mixtral paper: 46.7B
        ("mistralai/Mixtral-8x22B-v0.1", 140.62, 0.01),  # HF: 141B
        ("google/gemma-3-27b-it", 27.43, 0.01),  # HF: 27.4B (with the vision tower)
        ("google/gemma-3-4b-it", 4.30, 0.01),  # HF: 4.3B
        ("zai-org/GLM-4.5-Air", 106.9, 0.2),  # model card: 106B total (MTP layer not counted)
        ("deepseek-ai/DeepSeek-V2-Lite", 15.7, 0.05),  # model card: 15.7B
    ],
)
def test_parameter_count_matches_published_size(model_id, billions, tol):
    assert abs(get_model(model_id).num_parameters() / 1e9 - billions) <= tol


@pytest.mark.parametrize("model_id", sorted(FIELD))
def test_module_invariants(model_id):
    f = get_model(model_id)
    mods = f.linear_modules()
    vision = f.vision_linear_modules()
    names = f.module_names()
    assert len(set(names)) == len(names), "duplicate module names"
    assert names[0] == f.module_prefix + "embed_tokens" and names[-1] == f.lm_head_name
    for m in mods + vision:
        assert m.kind in LINEAR_KINDS and m.parallel in PARALLEL_STYLES
        assert (m.expert is not None) == m.kind.startswith("expert_")
    assert all((m.layer is None) == (m.kind == "lm_head") for m in mods)
    assert all(m.layer is None and m.kind.startswith("vision_") for m in vision)
    assert bool(vision) == (f.vision is not None)
    groups = f.symbolic_groups()
    assert groups["lm_head"] == [f.lm_head_name]
    assert groups["embeddings"][0] == f.module_prefix + "embed_tokens"
    assert set(groups["router"]) == {m.name for m in mods if m.kind == "router"}
    assert bool(groups["router"]) == f.is_moe
    projector = {"multi_modal_projector"} if f.vision is not None else set()
    listed = set(groups["norms"]) | set(groups["embeddings"]) | {m.name for m in mods + vision} | projector
    assert listed == set(names)


def test_qk_norm_per_architecture():
    """The fact an FP8-KV rule reads: QK-norm models normalize k per head (listed as self_attn.k_norm)."""
    for mid in catalog_ids():
        f = get_model(mid)
        assert f.qk_norm == any(n.endswith(".self_attn.k_norm") for n in f.module_names()), mid
    with_norm = {mid for mid in catalog_ids() if get_model(mid).qk_norm}
    assert {"Qwen/Qwen3-8B", "Qwen/Qwen3-235B-A22B", "google/gemma-3-27b-it"} <= with_norm
    for mid in (
        "meta-llama/Llama-3.1-70B",
        "Qwen/Qwen2.5-7B",
        "mistralai/Mixtral-8x7B-v0.1",
        "zai-org/GLM-4.5-Air",
    ):
        assert mid not in with_norm


def test_mixtral_names_router_and_experts_as_the_checkpoint_and_vllm_do():
    f = get_model("mistralai/Mixtral-8x7B-v0.1")
    assert f.symbolic_groups()["router"][0] == "model.layers.0.block_sparse_moe.gate"
    assert f.fused_groups()["experts"] == ["w1", "w3", "w2"]
    w1 = f.linear_module("model.layers.31.block_sparse_moe.experts.7.w1")
    w2 = f.linear_module("model.layers.31.block_sparse_moe.experts.7.w2")
    assert w1 is not None and w2 is not None
    assert (w1.kind, w1.out_features, w1.in_features, w1.parallel) == ("expert_in", 14336, 4096, "column")
    assert (w2.kind, w2.out_features, w2.in_features, w2.parallel) == ("expert_out", 4096, 14336, "row")
    assert w1.fused_name == "model.layers.31.block_sparse_moe.experts"
    assert len(f.fused_instances()["model.layers.0.block_sparse_moe.experts"]) == 8 * 3


def test_gemma3_multimodal_layout():
    f = get_model("google/gemma-3-4b-it")
    names = set(f.module_names())
    layer = "language_model.model.layers.5."
    for suffix in (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
        "self_attn.q_norm",
        "self_attn.k_norm",
    ):
        assert layer + suffix in f.symbolic_groups()["norms"]
    assert f.linear_module("language_model.lm_head").tied
    # 5 sliding-window layers for each full-attention one: layers 5, 11, ... attend over everything
    assert 5 not in f.sliding_layers and 4 in f.sliding_layers and len(f.sliding_layers) == 34 - 5
    fc1 = {m.name: m for m in f.vision_linear_modules()}[
        "vision_tower.vision_model.encoder.layers.26.mlp.fc1"
    ]
    assert (fc1.out_features, fc1.in_features, fc1.bias) == (
        4304,
        1152,
        True,
    )  # 4304 is not a multiple of 128
    assert "multi_modal_projector" in names and "vision_tower.vision_model.post_layernorm" in names
    assert not any(m.name.startswith("vision_tower") for m in f.linear_modules())


def test_deepseek_v2_lite_has_no_q_compression():
    f = get_model("deepseek-ai/DeepSeek-V2-Lite")
    q = f.linear_module("model.layers.0.self_attn.q_proj")
    assert q is not None and q.kind == "mla_q" and (q.out_features, q.in_features) == (16 * 192, 2048)
    assert f.linear_module("model.layers.0.self_attn.q_a_proj") is None
    assert "fused_qkv_a_proj" not in f.fused_groups()
    assert len(f.symbolic_groups()["router"]) == 26


def test_glm45_air_router_bias_and_shared_expert():
    f = get_model("zai-org/GLM-4.5-Air")
    assert f.linear_module("model.layers.0.mlp.gate") is None  # first layer dense
    sh = f.linear_module("model.layers.1.mlp.shared_experts.up_proj")
    assert sh is not None and (sh.out_features, sh.in_features) == (1408, 4096)
    q = f.linear_module("model.layers.1.self_attn.q_proj")
    o = f.linear_module("model.layers.1.self_attn.o_proj")
    assert q is not None and o is not None and q.bias and not o.bias


@pytest.mark.parametrize(
    "name, first",
    [
        # REF001 suggested Qwen3-30B-A3B for Qwen3-235B
        ("Qwen/Qwen3-235B", "Qwen/Qwen3-235B-A22B"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-30B-A3B"),
        ("meta-llama/Llama-3.3-70B", "meta-llama/Llama-3.3-70B-Instruct"),
        ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mistralai/Mixtral-8x22B-v0.1"),
        ("google/gemma-3-12b-pt", "google/gemma-3-12b-it"),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", "deepseek-ai/DeepSeek-V2-Lite"),
        ("THUDM/GLM-4.5-Air", "zai-org/GLM-4.5-Air"),
    ],
)
def test_unknown_release_suggests_its_family_and_size(name, first):
    from fp8spec.catalog import UnknownModel

    with pytest.raises(UnknownModel) as err:
        get_model(name)
    assert err.value.suggestions[0] == first


def test_fp8_kv_qk_norm_fact_agrees_with_the_catalog():
    """The verl profile's FP8-KV risk fact names architectures; the catalog's module-derived flag must agree."""
    from fp8spec.catalog._arch import ARCHITECTURES
    from fp8spec.profiles import load_profile

    fact = load_profile("verl", "0.9.1").value("risk.fp8_kv_without_qk_norm")
    for arch in fact["without_qk_norm"]:
        assert ARCHITECTURES[arch].qk_norm is False, arch
    for arch in fact["with_qk_norm"]:
        assert ARCHITECTURES[arch].qk_norm is True, arch
    by_arch = {get_model(m).architecture: get_model(m).qk_norm for m in catalog_ids()}
    assert all(by_arch[a] is False for a in fact["without_qk_norm"] if a in by_arch)
    assert all(by_arch[a] is True for a in fact["with_qk_norm"] if a in by_arch)
    assert any(r["model"].startswith("Qwen/Qwen2.5") for r in fact["reported"])
    assert not get_model("Qwen/Qwen2.5-7B").qk_norm  # the reported model's family
