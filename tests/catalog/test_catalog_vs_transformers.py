"""Cross-check the generated layout against transformers' own modeling code.

Tiny configs of each supported architecture are instantiated on torch's meta device (no memory, no download);
their state-dict keys, mapped back to checkpoint keys with transformers' own conversion mapping for stacked
experts, must equal ``module_names()``, and every weight shape must equal the ``LinearModule`` shape.
"""

from __future__ import annotations

import json
import re

import pytest

from fp8spec.catalog import LinearModule, model_from_config
from tests.conftest import require

torch = require("torch")
transformers = require("transformers")

_BASE = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "vocab_size": 256,
}

CASES = {
    "llama": ("LlamaConfig", dict(_BASE, num_key_value_heads=2)),
    "llama-bias": ("LlamaConfig", dict(_BASE, num_key_value_heads=2, attention_bias=True)),
    "llama-tied": ("LlamaConfig", dict(_BASE, num_key_value_heads=4, tie_word_embeddings=True)),
    "mistral": ("MistralConfig", dict(_BASE, num_key_value_heads=2, head_dim=32)),
    "qwen2": ("Qwen2Config", dict(_BASE, num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", dict(_BASE, num_key_value_heads=2, head_dim=32)),
    "qwen3-moe": (
        "Qwen3MoeConfig",
        dict(
            _BASE,
            num_key_value_heads=2,
            head_dim=32,
            moe_intermediate_size=48,
            num_experts=6,
            num_experts_per_tok=2,
            mlp_only_layers=[2],
            decoder_sparse_step=1,
        ),
    ),
    "qwen3-moe-step2": (
        "Qwen3MoeConfig",
        dict(
            _BASE,
            num_key_value_heads=2,
            moe_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=2,
        ),
    ),
    "deepseek-v3": (
        "DeepseekV3Config",
        dict(
            _BASE,
            num_key_value_heads=4,
            moe_intermediate_size=32,
            n_routed_experts=4,
            n_shared_experts=2,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            first_k_dense_replace=1,
            q_lora_rank=24,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=12,
        ),
    ),
    "deepseek-v2-lite": (
        "DeepseekV2Config",
        dict(
            _BASE,
            num_key_value_heads=4,
            moe_intermediate_size=32,
            n_routed_experts=4,
            n_shared_experts=1,
            num_experts_per_tok=2,
            first_k_dense_replace=2,
            q_lora_rank=None,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=8,
        ),
    ),
}

_STACKED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<param>gate_up_proj|down_proj)$")


def _checkpoint_shapes(model) -> dict[str, tuple[int, ...]]:
    """state_dict -> {checkpoint weight key: shape}, unstacking v5's fused expert tensors the way
    transformers' conversion_mapping documents (gate_up_proj [E, 2I, H] <- experts.*.{gate,up}_proj)."""
    out: dict[str, tuple[int, ...]] = {}
    for key, tensor in model.state_dict().items():
        shape = tuple(tensor.shape)
        m = _STACKED.match(key)
        if m:
            experts = shape[0]
            if m["param"] == "gate_up_proj":
                per = (shape[1] // 2, shape[2])
                for j in range(experts):
                    out[f"{m['prefix']}.{j}.gate_proj.weight"] = per
                    out[f"{m['prefix']}.{j}.up_proj.weight"] = per
            else:
                for j in range(experts):
                    out[f"{m['prefix']}.{j}.down_proj.weight"] = shape[1:]
            continue
        out[key] = shape
    return out


def test_conversion_mapping_confirms_per_expert_checkpoint_keys():
    mapping = require(
        "transformers.conversion_mapping", reason="transformers < 5 keeps per-expert modules"
    )
    get_checkpoint_conversion_mapping = mapping.get_checkpoint_conversion_mapping

    for model_type in ("qwen3_moe", "deepseek_v3"):
        sources = [p for conv in get_checkpoint_conversion_mapping(model_type) for p in conv.source_patterns]
        assert "mlp.experts.*.gate_proj.weight" in sources
        assert "mlp.experts.*.down_proj.weight" in sources


@pytest.mark.parametrize("case", sorted(CASES))
def test_layout_matches_transformers(tmp_path, case):
    cls_name, kwargs = CASES[case]
    config = getattr(transformers, cls_name)(**kwargs)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    shapes = _checkpoint_shapes(model)

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()), encoding="utf-8")
    facts = model_from_config(path)

    params = {k.rsplit(".", 1)[0] for k in shapes}
    assert set(facts.module_names()) == params

    linears: dict[str, LinearModule] = {m.name: m for m in facts.linear_modules()}
    for m in linears.values():
        if m.tied:
            continue
        assert shapes[m.name + ".weight"] == (m.out_features, m.in_features), m.name
        assert (m.name + ".bias" in shapes) == m.bias, m.name
    # every 2-D weight other than the embedding is a listed linear; every untied linear has its weight
    weights_2d = {k[: -len(".weight")] for k, s in shapes.items() if k.endswith(".weight") and len(s) == 2}
    untied = {n for n, m in linears.items() if not m.tied}
    assert untied <= weights_2d - set(facts.symbolic_groups()["embeddings"]) <= set(linears)
    assert facts.tie_word_embeddings == any(m.tied for m in linears.values())

    assert facts.num_parameters() == sum(
        torch.Size(s).numel()
        for k, s in shapes.items()
        if not (facts.tie_word_embeddings and k == "lm_head.weight")
    )
    for norm in facts.symbolic_groups()["norms"]:
        assert len(shapes[norm + ".weight"]) == 1, norm
    for router in facts.symbolic_groups()["router"]:
        assert router.endswith(".mlp.gate")
