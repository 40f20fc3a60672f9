"""Catalog entries: cited numbers, module counts, shapes, names, groups, TP styles."""

from __future__ import annotations

from collections import Counter

import pytest

from fp8spec.catalog import (
    LINEAR_KINDS,
    PARALLEL_STYLES,
    LinearModule,
    ModelFacts,
    UnknownModel,
    catalog_ids,
    get_model,
)
from fp8spec.catalog._parse import facts_from_dict
from fp8spec.catalog._store import MODELS_DIR, filename_to_id, id_to_filename, load_entry

REQUIRED_IDS = {
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

# Values cited in shared/research/peers.md section 4.1 (config.json of each model).
_QWEN3_8B = {
    "architecture": "Qwen3ForCausalLM",
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": None,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 36,
    "num_experts": 0,
    "num_experts_per_tok": 0,
    "first_k_dense_layers": 0,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "attention": "gqa",
    "is_moe": False,
    "qk_norm": True,
    "qkv_bias": False,
}
_QWEN3_30B = {
    "architecture": "Qwen3MoeForCausalLM",
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "shared_expert_intermediate_size": None,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "first_k_dense_layers": 0,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "attention": "gqa",
    "is_moe": True,
    "moe_layers": tuple(range(48)),
}
_QWEN25_7B = {
    "architecture": "Qwen2ForCausalLM",
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 28,
    "num_experts": 0,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "attention": "gqa",
    "is_moe": False,
    "qkv_bias": True,
    "o_proj_bias": False,
    "qk_norm": False,
}
_LLAMA31_8B = {
    "architecture": "LlamaForCausalLM",
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 32,
    "num_experts": 0,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention": "gqa",
    "is_moe": False,
    "qkv_bias": False,
    "qk_norm": False,
}
EXPECTED = {
    "Qwen/Qwen3-8B": dict(_QWEN3_8B, max_position_embeddings=40960),
    "Qwen/Qwen3-8B-Base": dict(_QWEN3_8B, max_position_embeddings=32768),
    "Qwen/Qwen3-30B-A3B": dict(_QWEN3_30B, max_position_embeddings=40960),
    "Qwen/Qwen3-30B-A3B-Base": dict(_QWEN3_30B, max_position_embeddings=32768),
    "Qwen/Qwen2.5-7B": dict(_QWEN25_7B, max_position_embeddings=131072),
    "Qwen/Qwen2.5-7B-Instruct": dict(_QWEN25_7B, max_position_embeddings=32768),
    "meta-llama/Llama-3.1-8B": dict(_LLAMA31_8B, max_position_embeddings=131072),
    "meta-llama/Llama-3.1-8B-Instruct": dict(_LLAMA31_8B, max_position_embeddings=131072),
    "deepseek-ai/DeepSeek-V3": {
        "architecture": "DeepseekV3ForCausalLM",
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "shared_expert_intermediate_size": 2048,
        "num_shared_experts": 1,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "head_dim": 192,
        "num_hidden_layers": 61,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "first_k_dense_layers": 3,
        "vocab_size": 129280,
        "tie_word_embeddings": False,
        "attention": "mla",
        "is_moe": True,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_mtp_layers": 1,
        "moe_layers": tuple(range(3, 61)),
        "max_position_embeddings": 163840,
    },
}


def test_catalog_holds_the_required_models_sorted():
    ids = catalog_ids()
    assert REQUIRED_IDS <= set(ids)
    assert ids == sorted(ids)
    # the entries for the field's RL models carry their cited numbers in test_catalog_field_models.py
    assert set(EXPECTED) <= set(ids)


def test_catalog_ids_returns_a_fresh_list():
    ids = catalog_ids()
    ids.clear()
    assert catalog_ids()


@pytest.mark.parametrize("model_id", sorted(EXPECTED))
def test_cited_numbers(model_id):
    facts = get_model(model_id)
    assert isinstance(facts, ModelFacts)
    assert facts.id == model_id
    for key, want in EXPECTED[model_id].items():
        assert getattr(facts, key) == want, f"{model_id}.{key}"


@pytest.mark.parametrize("model_id", sorted(EXPECTED))
def test_entry_file_is_named_after_its_id_and_cites_a_source(model_id):
    path = MODELS_DIR / id_to_filename(model_id)
    assert path.is_file()
    assert filename_to_id(path.name) == model_id
    entry = load_entry(model_id)
    assert entry["id"] == model_id
    assert len(entry["source"].split()) >= 10
    assert get_model(model_id).source == entry["source"].strip()


def test_every_file_in_models_dir_is_a_catalog_id():
    files = sorted(p.name for p in MODELS_DIR.iterdir() if not p.name.startswith("."))
    assert files == sorted(id_to_filename(i) for i in catalog_ids())


def test_get_model_is_cached_and_equal_to_a_fresh_parse():
    a = get_model("Qwen/Qwen3-8B")
    assert get_model("Qwen/Qwen3-8B") is a
    entry = load_entry("Qwen/Qwen3-8B")
    fresh = facts_from_dict(entry["config"], model_id="Qwen/Qwen3-8B", source="x", where="t")
    assert fresh == a and fresh is not a


# --- module counts --------------------------------------------------------------------------------------


def test_qwen3_8b_has_252_linears_plus_lm_head():
    f = get_model("Qwen/Qwen3-8B")
    mods = f.linear_modules()
    assert len([m for m in mods if m.kind != "lm_head"]) == 36 * 7 == 252
    assert len(mods) == 253
    assert mods[-1].name == "lm_head"


def test_qwen3_30b_a3b_counts():
    f = get_model("Qwen/Qwen3-30B-A3B")
    kinds = Counter(m.kind for m in f.linear_modules())
    # 48 layers x (4 attention + 128 experts x 3) = 18,624 without routers and lm_head
    assert sum(v for k, v in kinds.items() if k not in ("router", "lm_head")) == 48 * (4 + 128 * 3) == 18624
    assert kinds == {
        "attn_qkv": 48 * 3,
        "attn_out": 48,
        "expert_in": 48 * 256,
        "expert_out": 48 * 128,
        "router": 48,
        "lm_head": 1,
    }
    assert len(f.linear_modules()) == 18624 + 48 + 1


def test_deepseek_v3_counts():
    f = get_model("deepseek-ai/DeepSeek-V3")
    kinds = Counter(m.kind for m in f.linear_modules())
    assert kinds == {
        "mla_q_a": 61,
        "mla_q_b": 61,
        "mla_kv_a": 61,
        "mla_kv_b": 61,
        "attn_out": 61,
        "mlp_in": 3 * 2,
        "mlp_out": 3,
        "router": 58,
        "expert_in": 58 * 256 * 2,
        "expert_out": 58 * 256,
        "shared_expert_in": 58 * 2,
        "shared_expert_out": 58,
        "lm_head": 1,
    }


@pytest.mark.parametrize(
    "model_id, billions, tol",
    [
        ("Qwen/Qwen3-8B", 8.19, 0.01),  # model card: 8.2B; peers.md: ~8.19B
        ("Qwen/Qwen3-30B-A3B", 30.5, 0.05),  # model card: 30.5B
        ("meta-llama/Llama-3.1-8B", 8.03, 0.01),  # HF: 8.03B
        ("Qwen/Qwen2.5-7B", 7.61, 0.01),  # model card: 7.61B
        ("deepseek-ai/DeepSeek-V3", 671.0, 0.5),  # README_WEIGHTS.md: main model 671B
    ],
)
def test_parameter_count_matches_published_size(model_id, billions, tol):
    assert abs(get_model(model_id).num_parameters() / 1e9 - billions) <= tol


def test_deepseek_v3_with_mtp_matches_685b_and_11_5b_mtp():
    f = get_model("deepseek-ai/DeepSeek-V3")
    total = f.num_parameters(include_mtp=True)
    assert abs(total / 1e9 - 685) < 1  # HF model card: 685B = 671B main + MTP
    emb = f.vocab_size * f.hidden_size
    mtp_unique = total - f.num_parameters() - 2 * emb  # MTP embed_tokens and shared_head.head are copies
    assert 11.4e9 < mtp_unique < 11.7e9  # README_WEIGHTS.md: "11.5B unique parameters"


# --- shapes and styles ----------------------------------------------------------------------------------


def _mod(facts, name) -> LinearModule:
    m = facts.linear_module(name)
    assert m is not None, name
    return m


def test_qwen3_8b_shapes_styles_groups():
    f = get_model("Qwen/Qwen3-8B")
    q = _mod(f, "model.layers.0.self_attn.q_proj")
    assert (q.out_features, q.in_features, q.parallel, q.group, q.kind) == (
        4096,
        4096,
        "column",
        "qkv_proj",
        "attn_qkv",
    )
    k = _mod(f, "model.layers.35.self_attn.k_proj")
    assert (k.out_features, k.in_features, k.layer) == (1024, 4096, 35)
    o = _mod(f, "model.layers.0.self_attn.o_proj")
    assert (o.out_features, o.in_features, o.parallel, o.group, o.kind) == (
        4096,
        4096,
        "row",
        None,
        "attn_out",
    )
    g = _mod(f, "model.layers.0.mlp.gate_proj")
    assert (g.out_features, g.in_features, g.parallel, g.group) == (12288, 4096, "column", "gate_up_proj")
    d = _mod(f, "model.layers.0.mlp.down_proj")
    assert (d.out_features, d.in_features, d.parallel, d.group, d.kind) == (
        4096,
        12288,
        "row",
        None,
        "mlp_out",
    )
    lm = _mod(f, "lm_head")
    assert (lm.out_features, lm.in_features, lm.parallel, lm.layer, lm.tied) == (
        151936,
        4096,
        "column",
        None,
        False,
    )
    assert q.fused_name == "model.layers.0.self_attn.qkv_proj"
    assert g.fused_name == "model.layers.0.mlp.gate_up_proj"
    assert o.fused_name is None


def test_qwen3_30b_expert_router_shapes():
    f = get_model("Qwen/Qwen3-30B-A3B-Base")
    e = _mod(f, "model.layers.3.mlp.experts.17.gate_proj")
    assert (e.out_features, e.in_features, e.parallel, e.kind, e.expert, e.layer) == (
        768,
        2048,
        "column",
        "expert_in",
        17,
        3,
    )
    assert e.group == "experts" and e.fused_name == "model.layers.3.mlp.experts"
    dn = _mod(f, "model.layers.47.mlp.experts.127.down_proj")
    assert (dn.out_features, dn.in_features, dn.parallel, dn.kind) == (2048, 768, "row", "expert_out")
    r = _mod(f, "model.layers.0.mlp.gate")
    assert (r.out_features, r.in_features, r.parallel, r.kind, r.group) == (
        128,
        2048,
        "replicated",
        "router",
        None,
    )
    q = _mod(f, "model.layers.0.self_attn.q_proj")
    assert q.out_features == 32 * 128  # head_dim 128 from config (not hidden/heads = 64)
    assert f.linear_module("model.layers.0.mlp.experts.128.gate_proj") is None
    assert f.linear_module("model.layers.0.mlp.gate_proj") is None


def test_qwen25_qkv_bias_only():
    f = get_model("Qwen/Qwen2.5-7B")
    assert _mod(f, "model.layers.0.self_attn.q_proj").bias
    assert _mod(f, "model.layers.0.self_attn.v_proj").bias
    assert not _mod(f, "model.layers.0.self_attn.o_proj").bias
    assert _mod(f, "model.layers.0.self_attn.k_proj").out_features == 4 * 128


def test_deepseek_v3_mla_shapes():
    f = get_model("deepseek-ai/DeepSeek-V3")
    qa = _mod(f, "model.layers.0.self_attn.q_a_proj")
    assert (qa.out_features, qa.in_features, qa.parallel, qa.group) == (
        1536,
        7168,
        "replicated",
        "fused_qkv_a_proj",
    )
    qb = _mod(f, "model.layers.0.self_attn.q_b_proj")
    assert (qb.out_features, qb.in_features, qb.parallel) == (128 * 192, 1536, "column")
    kva = _mod(f, "model.layers.0.self_attn.kv_a_proj_with_mqa")
    assert (kva.out_features, kva.in_features, kva.parallel, kva.kind) == (
        576,
        7168,
        "replicated",
        "mla_kv_a",
    )
    assert kva.fused_name == qa.fused_name == "model.layers.0.self_attn.fused_qkv_a_proj"
    kvb = _mod(f, "model.layers.0.self_attn.kv_b_proj")
    assert (kvb.out_features, kvb.in_features, kvb.parallel) == (128 * 256, 512, "column")
    o = _mod(f, "model.layers.0.self_attn.o_proj")
    assert (o.out_features, o.in_features, o.parallel) == (7168, 128 * 128, "row")
    dense = _mod(f, "model.layers.2.mlp.up_proj")
    assert (dense.out_features, dense.kind) == (18432, "mlp_in")
    assert f.linear_module("model.layers.2.mlp.gate") is None
    assert f.linear_module("model.layers.3.mlp.gate_proj") is None
    sh = _mod(f, "model.layers.3.mlp.shared_experts.up_proj")
    assert (sh.out_features, sh.in_features, sh.kind, sh.group) == (
        2048,
        7168,
        "shared_expert_in",
        "gate_up_proj",
    )
    assert sh.fused_name == "model.layers.3.mlp.shared_experts.gate_up_proj"
    ex = _mod(f, "model.layers.60.mlp.experts.255.down_proj")
    assert (ex.out_features, ex.in_features) == (7168, 2048)
    assert f.kv_size == 576


@pytest.mark.parametrize("model_id", sorted(EXPECTED))
def test_module_invariants(model_id):
    f = get_model(model_id)
    mods = f.linear_modules()
    names = f.module_names()
    assert len(set(names)) == len(names), "duplicate module names"
    assert {m.name for m in mods} <= set(names)
    assert names[0] == "model.embed_tokens" and names[-1] == "lm_head"
    for m in mods:
        assert m.kind in LINEAR_KINDS and m.parallel in PARALLEL_STYLES
        assert m.out_features > 0 and m.in_features > 0
        assert (m.layer is None) == (m.kind == "lm_head")
        assert (m.expert is not None) == m.kind.startswith("expert_")
    groups = f.symbolic_groups()
    assert set(groups) == {"lm_head", "embeddings", "norms", "router"}
    assert groups["lm_head"] == ["lm_head"]
    assert groups["embeddings"] == ["model.embed_tokens"]
    assert set(groups["router"]) == {m.name for m in mods if m.kind == "router"}
    assert bool(groups["router"]) == f.is_moe
    everything = set(groups["norms"]) | set(groups["embeddings"]) | {m.name for m in mods}
    assert everything == set(names)
    assert not any(f".layers.{f.num_hidden_layers}." in n for n in names), (
        "MTP leaked into the default listing"
    )


def test_norm_names_per_architecture():
    qwen3 = get_model("Qwen/Qwen3-8B").symbolic_groups()["norms"]
    assert len(qwen3) == 36 * 4 + 1
    assert "model.layers.0.self_attn.q_norm" in qwen3 and "model.layers.0.self_attn.k_norm" in qwen3
    assert qwen3[-1] == "model.norm"
    llama = get_model("meta-llama/Llama-3.1-8B").symbolic_groups()["norms"]
    assert len(llama) == 32 * 2 + 1
    assert not any("q_norm" in n for n in llama)
    ds = get_model("deepseek-ai/DeepSeek-V3").symbolic_groups()["norms"]
    assert len(ds) == 61 * 4 + 1
    assert "model.layers.60.self_attn.q_a_layernorm" in ds and "model.layers.0.self_attn.kv_a_layernorm" in ds


def test_dense_models_have_no_router():
    for mid in ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B"):
        assert get_model(mid).symbolic_groups()["router"] == []
    assert len(get_model("Qwen/Qwen3-30B-A3B").symbolic_groups()["router"]) == 48
    assert get_model("Qwen/Qwen3-30B-A3B").symbolic_groups()["router"][0] == "model.layers.0.mlp.gate"


def test_fused_groups_per_architecture():
    assert get_model("Qwen/Qwen3-8B").fused_groups() == {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
    assert get_model("Qwen/Qwen3-30B-A3B").fused_groups() == {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
        "experts": ["gate_proj", "up_proj", "down_proj"],
    }
    assert get_model("deepseek-ai/DeepSeek-V3").fused_groups() == {
        "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
        "gate_up_proj": ["gate_proj", "up_proj"],
        "experts": ["gate_proj", "up_proj", "down_proj"],
    }


def test_every_grouped_module_agrees_with_fused_groups():
    for mid in ("Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3"):
        f = get_model(mid)
        groups = f.fused_groups()
        for m in f.linear_modules():
            if m.group is not None:
                assert m.suffix in groups[m.group], (mid, m.name)
            else:
                assert not any(
                    m.suffix in members and m.kind not in ("mlp_out", "shared_expert_out")
                    for members in groups.values()
                ), (mid, m.name)


def test_fused_instances():
    f = get_model("Qwen/Qwen3-30B-A3B")
    inst = f.fused_instances()
    assert inst["model.layers.0.self_attn.qkv_proj"] == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.k_proj",
        "model.layers.0.self_attn.v_proj",
    ]
    assert len(inst["model.layers.5.mlp.experts"]) == 128 * 3
    assert len(inst) == 48 * 2
    assert "model.layers.0.mlp.gate_up_proj" not in inst  # no dense MLP in this model
    d = get_model("Qwen/Qwen3-8B").fused_instances()
    assert d["model.layers.7.mlp.gate_up_proj"] == [
        "model.layers.7.mlp.gate_proj",
        "model.layers.7.mlp.up_proj",
    ]


def test_listings_are_copies():
    f = get_model("Qwen/Qwen3-8B")
    f.linear_modules().clear()
    f.module_names().clear()
    f.symbolic_groups()["norms"].clear()
    f.fused_groups()["qkv_proj"].clear()
    f.fused_instances()["model.layers.0.self_attn.qkv_proj"].clear()
    assert len(f.linear_modules()) == 253
    assert len(f.symbolic_groups()["norms"]) == 145
    assert f.fused_groups()["qkv_proj"] == ["q_proj", "k_proj", "v_proj"]
    assert len(f.fused_instances()["model.layers.0.self_attn.qkv_proj"]) == 3


def test_the_largest_models_build_their_layout_once(monkeypatch):
    """Listing the modules of the largest models builds the layout once per facts object, however often it
    is asked (the speed itself is a benchmark: benchmarks/bench_catalog.py)."""
    from fp8spec.catalog import _layout

    built = Counter()
    real = _layout.build_layout

    def counting(f, *, include_mtp):
        built[(f.id, include_mtp)] += 1
        return real(f, include_mtp=include_mtp)

    monkeypatch.setattr(_layout, "build_layout", counting)
    for mid in ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3"):
        entry = load_entry(mid)
        fresh = facts_from_dict(entry["config"], model_id=mid, source="x", where="t")  # no cached layout
        n = len(fresh.linear_modules())
        assert n > 18000
        for _ in range(3):
            assert len(fresh.linear_modules()) == n
            assert len(fresh.module_names()) >= n
        assert built[(mid, False)] == 1, built


# --- MTP -----------------------------------------------------------------------------------------------


def test_deepseek_mtp_is_opt_in():
    f = get_model("deepseek-ai/DeepSeek-V3")
    assert f.num_mtp_layers == 1
    plain = set(f.module_names())
    full = f.module_names(include_mtp=True)
    extra = [n for n in full if n not in plain]
    assert extra and all(n.startswith("model.layers.61.") for n in extra)
    for name in (
        "embed_tokens",
        "enorm",
        "hnorm",
        "eh_proj",
        "shared_head.norm",
        "shared_head.head",
        "mlp.gate",
        "mlp.experts.255.down_proj",
        "mlp.shared_experts.gate_proj",
        "self_attn.kv_b_proj",
    ):
        assert f"model.layers.61.{name}" in extra, name
    assert f.linear_module("model.layers.61.eh_proj") is None
    eh = f.linear_module("model.layers.61.eh_proj", include_mtp=True)
    assert (eh.out_features, eh.in_features, eh.kind, eh.parallel) == (
        7168,
        14336,
        "mtp_eh_proj",
        "replicated",
    )
    groups = f.symbolic_groups(include_mtp=True)
    assert "model.layers.61.shared_head.head" in groups["lm_head"]
    assert "model.layers.61.mlp.gate" in groups["router"]
    assert "model.layers.61.enorm" in groups["norms"]
    assert "model.layers.61.embed_tokens" in groups["embeddings"]
    assert len(f.linear_modules(include_mtp=True)) - len(f.linear_modules()) == 5 + 1 + 256 * 3 + 3 + 1 + 1


def test_unknown_model_is_raised_for_lowercase_id():
    with pytest.raises(UnknownModel):
        get_model("qwen/qwen3-8b")
