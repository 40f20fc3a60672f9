"""model_from_config: round trips, architecture rules, and a ConfigError (never a traceback) for bad files."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from fp8spec.catalog import (
    SUPPORTED_ARCHITECTURES,
    CatalogError,
    ConfigError,
    UnknownModel,
    catalog_ids,
    get_model,
    model_from_config,
)
from fp8spec.catalog._store import load_entry
from tests.conftest import require


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return p


def _cfg(model_id="Qwen/Qwen3-30B-A3B"):
    return copy.deepcopy(load_entry(model_id)["config"])


# --- round trips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", catalog_ids())
def test_round_trip_from_catalog_data(tmp_path, model_id):
    path = _write(tmp_path, _cfg(model_id))
    facts = model_from_config(path, model_id=model_id)
    assert facts == get_model(model_id)
    assert facts.linear_modules() == get_model(model_id).linear_modules()
    assert facts.module_names() == get_model(model_id).module_names()
    assert facts.source.endswith(str(path))


def test_default_id_is_name_or_path_else_the_file(tmp_path):
    cfg = _cfg("Qwen/Qwen3-8B")
    p = _write(tmp_path, cfg)
    assert model_from_config(p).id == str(p)
    cfg["_name_or_path"] = "/models/my-qwen"
    p = _write(tmp_path, cfg)
    assert model_from_config(p).id == "/models/my-qwen"
    assert model_from_config(str(p), model_id="mine").id == "mine"


def test_directory_with_config_json_is_accepted(tmp_path):
    _write(tmp_path, _cfg("Qwen/Qwen3-8B"))
    facts = model_from_config(tmp_path, model_id="Qwen/Qwen3-8B")
    assert facts == get_model("Qwen/Qwen3-8B")


def test_round_trip_from_transformers_qwen3moe_config(tmp_path):
    transformers = require("transformers")
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        tie_word_embeddings=False,
        max_position_embeddings=40960,
    )
    d = cfg.to_dict()
    assert d.get("architectures") is None  # resolved from model_type
    assert "num_local_experts" in d or "num_experts" in d  # transformers v5 writes num_local_experts
    facts = model_from_config(_write(tmp_path, d), model_id="Qwen/Qwen3-30B-A3B")
    assert facts == get_model("Qwen/Qwen3-30B-A3B")


def test_transformers_qwen3moe_sparse_step_and_mlp_only_layers(tmp_path):
    transformers = require("transformers")
    cfg = transformers.Qwen3MoeConfig(
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=8,
        num_experts_per_tok=2,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
        vocab_size=1024,
    )
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    facts = model_from_config(_write(tmp_path, cfg.to_dict()))
    # layer i is MoE iff i not in mlp_only_layers and (i+1) % 2 == 0 -> layers 1 and 5
    assert facts.moe_layers == (1, 5)
    assert facts.first_k_dense_layers == 1
    assert facts.dense_layers == (0, 2, 3, 4)
    assert facts.is_moe_layer(5) and not facts.is_moe_layer(3)
    assert facts.head_dim == 64  # transformers' to_dict has no head_dim: hidden / heads
    names = set(facts.module_names())
    assert "model.layers.3.mlp.gate_proj" in names and "model.layers.3.mlp.gate" not in names
    assert "model.layers.1.mlp.gate" in names and "model.layers.1.mlp.experts.7.up_proj" in names
    assert facts.symbolic_groups()["router"] == ["model.layers.1.mlp.gate", "model.layers.5.mlp.gate"]
    dense = facts.linear_module("model.layers.0.mlp.down_proj")
    assert (dense.out_features, dense.in_features) == (256, 512)


def test_transformers_deepseek_v3_defaults_match_the_catalog(tmp_path):
    transformers = require("transformers")
    d = transformers.DeepseekV3Config().to_dict()
    facts = model_from_config(_write(tmp_path, d), model_id="deepseek-ai/DeepSeek-V3")
    assert d.get("head_dim", 64) == 64  # transformers' head_dim is qk_rope_head_dim; ours is the q/k width
    assert facts.head_dim == 192
    # older transformers releases have no num_nextn_predict_layers; the default config has a short context
    assert facts.num_mtp_layers == d.get("num_nextn_predict_layers", 0)
    ours = get_model("deepseek-ai/DeepSeek-V3")
    # the released checkpoint is stored FP8 (its config.json has quantization_config); the defaults describe shapes
    assert facts.quantization is None and ours.quantization == "fp8"
    same = dataclasses.replace(
        facts, max_position_embeddings=ours.max_position_embeddings, num_mtp_layers=1, quantization="fp8"
    )
    assert same == ours


def test_quantization_config_is_read(tmp_path):
    base = get_model("Qwen/Qwen3-8B-Base")
    assert base.quantization is None
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
    }
    fp8 = dict(
        cfg, quantization_config={"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    )
    assert model_from_config(_write(tmp_path, fp8)).quantization == "fp8"
    assert (
        model_from_config(_write(tmp_path, dict(cfg, quantization_config={"bits": 4}))).quantization
        == "unknown"
    )
    with pytest.raises(ConfigError, match="quantization_config must be an object"):
        model_from_config(_write(tmp_path, dict(cfg, quantization_config="fp8")))


def test_qwen3_moe_with_zero_experts_is_dense(tmp_path):
    cfg = _cfg()
    cfg["num_experts"] = 0
    f = model_from_config(_write(tmp_path, cfg))
    assert not f.is_moe and f.num_experts == 0 and f.moe_intermediate_size is None
    assert f.symbolic_groups()["router"] == []
    assert f.linear_module("model.layers.0.mlp.gate_proj").out_features == 6144


def test_head_dim_falls_back_to_hidden_over_heads(tmp_path):
    cfg = _cfg("Qwen/Qwen3-8B")
    del cfg["head_dim"]
    cfg["hidden_size"] = 5120
    cfg["num_attention_heads"] = 40
    f = model_from_config(_write(tmp_path, cfg))
    assert f.head_dim == 128 and f.q_size == 5120


def test_missing_kv_heads_means_multi_head_attention(tmp_path):
    cfg = _cfg("meta-llama/Llama-3.1-8B")
    del cfg["num_key_value_heads"]
    f = model_from_config(_write(tmp_path, cfg))
    assert f.num_key_value_heads == 32
    assert f.linear_module("model.layers.0.self_attn.k_proj").out_features == 4096


def test_tied_embeddings_keep_lm_head_listed_but_marked(tmp_path):
    cfg = _cfg("Qwen/Qwen3-8B")
    untied = model_from_config(_write(tmp_path, cfg))
    cfg["tie_word_embeddings"] = True
    tied = model_from_config(_write(tmp_path, cfg))
    assert tied.tie_word_embeddings
    lm = tied.linear_module("lm_head")
    assert lm is not None and lm.tied and lm.kind == "lm_head"
    assert not untied.linear_module("lm_head").tied
    assert tied.symbolic_groups()["lm_head"] == ["lm_head"]
    assert "lm_head" in tied.module_names()
    assert untied.num_parameters() - tied.num_parameters() == 151936 * 4096


def test_deepseek_without_q_lora_uses_plain_q_proj(tmp_path):
    cfg = _cfg("deepseek-ai/DeepSeek-V3")
    cfg["q_lora_rank"] = None
    f = model_from_config(_write(tmp_path, cfg))
    q = f.linear_module("model.layers.0.self_attn.q_proj")
    assert (q.kind, q.out_features, q.in_features, q.parallel) == ("mla_q", 128 * 192, 7168, "column")
    assert f.linear_module("model.layers.0.self_attn.q_a_proj") is None
    assert "model.layers.0.self_attn.q_a_layernorm" not in f.module_names()
    assert "fused_qkv_a_proj" not in f.fused_groups()
    assert f.linear_module("model.layers.0.self_attn.kv_a_proj_with_mqa").group is None


def test_deepseek_moe_layer_freq(tmp_path):
    cfg = _cfg("deepseek-ai/DeepSeek-V3")
    cfg["moe_layer_freq"] = 2
    f = model_from_config(_write(tmp_path, cfg))
    assert f.moe_layers == tuple(i for i in range(3, 61) if i % 2 == 0)
    assert f.first_k_dense_layers == 4


def test_mistral_is_supported(tmp_path):
    cfg = _cfg("meta-llama/Llama-3.1-8B")
    cfg["architectures"] = ["MistralForCausalLM"]
    cfg["model_type"] = "mistral"
    f = model_from_config(_write(tmp_path, cfg))
    assert f.architecture == "MistralForCausalLM" and f.head_dim == 128
    assert "MistralForCausalLM" in SUPPORTED_ARCHITECTURES


def test_architecture_from_model_type_when_architectures_missing(tmp_path):
    cfg = _cfg("Qwen/Qwen2.5-7B")
    del cfg["architectures"]
    assert model_from_config(_write(tmp_path, cfg)).architecture == "Qwen2ForCausalLM"


def test_first_supported_architecture_wins(tmp_path):
    cfg = _cfg("Qwen/Qwen3-8B")
    cfg["architectures"] = ["SomethingElse", "Qwen3ForCausalLM"]
    assert model_from_config(_write(tmp_path, cfg)).architecture == "Qwen3ForCausalLM"


def test_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(_cfg("Qwen/Qwen3-8B")).encode())
    assert model_from_config(p).hidden_size == 4096


# --- errors --------------------------------------------------------------------------------------------


def _error(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        model_from_config(path)
    err = info.value
    assert isinstance(err, CatalogError) and isinstance(err, ValueError)
    assert "\n" not in str(err)
    return err


def test_bad_json_names_line_and_column(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{\n  "hidden_size": 4096,\n  "vocab_size": ,\n}\n', encoding="utf-8")
    err = _error(p)
    assert f"{p}:3:17: invalid JSON" in str(err)
    assert err.path == str(p)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "empty file"),
        ("   \n", "empty file"),
        ("[1, 2]", "must be a JSON object, got a list"),
        ('"just a string"', "must be a JSON object"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"hidden_size": NaN}', "NaN is not valid JSON"),
        ('{"hidden_size": ' + "9" * 5000 + "}", "1:17: a number with 5000 digits"),
        ("[" * 100000 + "]" * 100000, "invalid JSON"),
    ],
)
def test_malformed_json(tmp_path, text, needle):
    p = tmp_path / "config.json"
    p.write_text(text, encoding="utf-8")
    assert needle in str(_error(p))


def test_non_utf8_bytes(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b'{"model_type": "qwen3", "name": "\xff\xfe"}')
    err = _error(p)
    assert "not UTF-8" in str(err) and "0xff" in str(err)


def test_a_directory_without_config_json(tmp_path):
    err = _error(tmp_path)
    assert "is a directory" in str(err)


def test_missing_file(tmp_path):
    assert "no such file" in str(_error(tmp_path / "nope" / "config.json"))


def test_too_large_file(tmp_path, monkeypatch):
    import fp8spec.catalog._files as files

    monkeypatch.setattr(files, "MAX_CONFIG_BYTES", 100)
    p = _write(tmp_path, _cfg())
    assert "too large" in str(_error(p))


@pytest.mark.parametrize(
    "key",
    [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "intermediate_size",
        "moe_intermediate_size",
        "num_experts_per_tok",
        "num_experts",
    ],
)
def test_missing_required_key_is_named(tmp_path, key):
    cfg = _cfg()
    del cfg[key]
    err = _error(_write(tmp_path, cfg))
    assert f"missing required key {key!r}" in str(err) and "Qwen3MoeForCausalLM" in str(err)
    assert err.key == key


@pytest.mark.parametrize(
    "key",
    [
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "first_k_dense_replace",
        "n_shared_experts",
        "n_routed_experts",
    ],
)
def test_missing_deepseek_key_is_named(tmp_path, key):
    cfg = _cfg("deepseek-ai/DeepSeek-V3")
    del cfg[key]
    assert f"missing required key {key!r}" in str(_error(_write(tmp_path, cfg)))


def test_unsupported_architecture_lists_the_supported_ones(tmp_path):
    cfg = _cfg("Qwen/Qwen3-8B")
    cfg["architectures"] = ["GPT2LMHeadModel"]
    cfg["model_type"] = "gpt2"
    msg = str(_error(_write(tmp_path, cfg)))
    assert "unsupported architecture GPT2LMHeadModel" in msg
    for arch in SUPPORTED_ARCHITECTURES:
        assert arch in msg


def test_unsupported_model_type_without_architectures(tmp_path):
    msg = str(_error(_write(tmp_path, {"model_type": "gpt2", "hidden_size": 768})))
    assert "unsupported model_type 'gpt2'" in msg and "Qwen3MoeForCausalLM" in msg


def test_no_architecture_at_all(tmp_path):
    msg = str(_error(_write(tmp_path, {"hidden_size": 768})))
    assert "neither 'architectures' nor 'model_type'" in msg and "LlamaForCausalLM" in msg


def test_model_type_must_match_architecture(tmp_path):
    cfg = _cfg()
    cfg["model_type"] = "qwen3"
    assert "does not match architecture Qwen3MoeForCausalLM" in str(_error(_write(tmp_path, cfg)))


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("hidden_size", "2048", 'must be an integer, got "2048" (a string)'),
        ("hidden_size", 2048.5, "must be an integer"),
        ("hidden_size", True, "must be an integer"),
        ("hidden_size", None, "must be an integer, got null"),
        ("hidden_size", 0, "must be >= 1"),
        ("vocab_size", -5, "must be >= 1"),
        ("hidden_size", 10**20, "implausibly large"),
        ("num_hidden_layers", 100000, "implausibly large"),
        ("num_experts", 10**6, "implausibly large"),
        ("num_key_value_heads", 5, "not a multiple of num_key_value_heads"),
        ("num_experts_per_tok", 129, "implausibly large"),
        ("tie_word_embeddings", "yes", "must be true or false"),
        ("mlp_only_layers", [0, 48], "contains 48"),
        ("mlp_only_layers", "all", "must be a list of layer indices"),
        ("decoder_sparse_step", 0, "must be >= 1"),
        ("architectures", {"a": 1}, "'architectures' must be a list"),
        ("model_type", 7, "'model_type' must be a string"),
    ],
)
def test_bad_values(tmp_path, key, value, needle):
    cfg = _cfg()
    cfg[key] = value
    err = _error(_write(tmp_path, cfg))
    assert needle in str(err)


def test_expert_budget(tmp_path):
    cfg = _cfg()
    cfg["num_hidden_layers"] = 4000
    cfg["num_experts"] = 1000
    assert "implausibly large" in str(_error(_write(tmp_path, cfg)))


def test_head_dim_fallback_needs_divisible_hidden(tmp_path):
    cfg = _cfg("Qwen/Qwen3-8B")
    del cfg["head_dim"]
    cfg["hidden_size"] = 4100
    assert "not a multiple of num_attention_heads" in str(_error(_write(tmp_path, cfg)))


def test_non_path_argument():
    with pytest.raises(ConfigError):
        model_from_config(None)  # type: ignore[arg-type]


# --- unknown ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, first",
    [
        ("qwen/qwen3-8b", "Qwen/Qwen3-8B"),
        ("Qwen/Qwen3-8b-base", "Qwen/Qwen3-8B-Base"),
        ("Qwen3-30B-A3B-Base", "Qwen/Qwen3-30B-A3B-Base"),
        ("Qwen/Qwen3-30B-A3B-base", "Qwen/Qwen3-30B-A3B-Base"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("deepseek-ai/DeepSeek-V3-Base", "deepseek-ai/DeepSeek-V3"),
        ("Qwen/Qwen2.5-7B-Instruc", "Qwen/Qwen2.5-7B-Instruct"),
    ],
)
def test_unknown_model_suggestions(name, first):
    with pytest.raises(UnknownModel) as info:
        get_model(name)
    err = info.value
    assert err.name == name
    assert err.suggestions and err.suggestions[0] == first
    assert f"did you mean {first!r}" in str(err)
    assert err.known == catalog_ids()
    for mid in catalog_ids():
        assert mid in str(err)
    assert "config_path" in str(err)


@pytest.mark.parametrize("name", ["gpt2", "", "   ", None, 42])
def test_unknown_model_without_suggestions(name):
    with pytest.raises(UnknownModel) as info:
        get_model(name)  # type: ignore[arg-type]
    assert info.value.suggestions == []
    assert "did you mean" not in str(info.value)
    assert isinstance(info.value, LookupError) and isinstance(info.value, CatalogError)
