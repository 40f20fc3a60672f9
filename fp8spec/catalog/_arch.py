"""The architectures the catalog can lay out: how each config.json names its shapes and its checkpoint modules.

Data, not logic: ``_parse`` reads a config through the row of its architecture, ``_layout`` names the modules.
Every value here was read from transformers 5.10.4 (the version the tests instantiate) and checked against
it by ``tests/catalog/test_catalog_entries_vs_transformers.py``; the vLLM 0.24.0 module names agree (cited).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

#: how routed experts are read from a config and named in the checkpoint
#:   qwen3:    num_experts / moe_intermediate_size / decoder_sparse_step / mlp_only_layers; mlp.experts.{j}.*_proj
#:   mixtral:  num_local_experts, experts of intermediate_size on every layer; block_sparse_moe.experts.{j}.w1/w3/w2
#:   deepseek: n_routed_experts / n_shared_experts / first_k_dense_replace / moe_layer_freq (DeepSeek, GLM-4.5)
MOE_STYLES = ("qwen3", "mixtral", "deepseek")


def _frozen(d: dict) -> Mapping[str, object]:
    return MappingProxyType(dict(d))


# transformers 5.10.4 models/gemma3/configuration_gemma3.py Gemma3TextConfig.__init__ defaults. Gemma 3's
# multimodal config.json files (google/gemma-3-4b-it) leave heads, head_dim and vocab to these defaults.
GEMMA3_TEXT_DEFAULTS = _frozen(
    {
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    }
)
# transformers 5.10.4 models/siglip/configuration_siglip.py SiglipVisionConfig.__init__ defaults
SIGLIP_VISION_DEFAULTS = _frozen(
    {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_channels": 3,
        "image_size": 224,
        "patch_size": 16,
        "vision_use_head": True,
    }
)


@dataclass(frozen=True)
class Arch:
    name: str
    model_types: tuple[str, ...]
    family: str  # "gqa" | "mla"
    moe: str | None = None  # one of MOE_STYLES, or None for a dense architecture
    qk_norm: bool | str = False  # self_attn.q_norm / k_norm: always, never, or as a config key says
    qkv_bias: str | bool = "attention_bias"  # True/False, or read from config key attention_bias
    o_bias: str | bool = "attention_bias"
    # norms of a decoder layer besides input_layernorm / post_attention_layernorm (Gemma's sandwich norms)
    extra_norms: tuple[str, ...] = ()
    router_bias: bool = False  # router carries e_score_correction_bias [E] (noaux_tc)
    mtp: bool = False  # reads num_nextn_predict_layers (DeepSeek-style MTP layers after the main ones)
    sliding: bool = False  # per-layer sliding/full attention (Gemma 3: layer_types / sliding_window_pattern)
    text_config: bool = False  # the decoder's keys sit under "text_config" (multimodal wrapper)
    vision: str | None = None  # vision encoder under "vision_config": "siglip"
    prefix: str = "model."  # checkpoint prefix of embed_tokens / layers / norm
    lm_head: str = "lm_head"  # checkpoint name of the output projection
    defaults: Mapping[str, object] = field(default_factory=lambda: _frozen({}))


ARCHITECTURES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("LlamaForCausalLM", ("llama",), "gqa"),
        Arch("MistralForCausalLM", ("mistral",), "gqa", qkv_bias=False, o_bias=False),
        # modeling_mixtral.py MixtralAttention: q/k/v/o without bias; vLLM mixtral.py:123-129 router
        # block_sparse_moe.gate (ReplicatedLinear, quant_config=None)
        Arch("MixtralForCausalLM", ("mixtral",), "gqa", moe="mixtral", qkv_bias=False, o_bias=False),
        Arch("Qwen2ForCausalLM", ("qwen2",), "gqa", qkv_bias=True, o_bias=False),
        Arch("Qwen3ForCausalLM", ("qwen3",), "gqa", qk_norm=True),
        Arch("Qwen3MoeForCausalLM", ("qwen3_moe",), "gqa", moe="qwen3", qk_norm=True),
        # modeling_gemma3.py Gemma3Attention (q_norm/k_norm, attention_bias on q/k/v/o), Gemma3DecoderLayer
        # (pre_/post_feedforward_layernorm)
        Arch(
            "Gemma3ForCausalLM",
            ("gemma3_text",),
            "gqa",
            qk_norm=True,
            extra_norms=("pre_feedforward_layernorm", "post_feedforward_layernorm"),
            sliding=True,
            defaults=GEMMA3_TEXT_DEFAULTS,
        ),
        # checkpoint names as released (language_model.model.*, vision_tower.vision_model.*): transformers
        # conversion_mapping.py "llava" / "CLIPVisionModel" renamings; vLLM gemma3_mm.py:484-491 maps back
        Arch(
            "Gemma3ForConditionalGeneration",
            ("gemma3",),
            "gqa",
            qk_norm=True,
            extra_norms=("pre_feedforward_layernorm", "post_feedforward_layernorm"),
            sliding=True,
            text_config=True,
            vision="siglip",
            prefix="language_model.model.",
            lm_head="language_model.lm_head",
            defaults=GEMMA3_TEXT_DEFAULTS,
        ),
        # modeling_glm4_moe.py: q/k/v bias = attention_bias, o_proj without; q_norm/k_norm iff use_qk_norm;
        # Glm4MoeTopkRouter carries e_score_correction_bias. Its MTP layer (num_nextn_predict_layers) is not
        # read: vLLM 0.24.0 glm4_moe_mtp.py reuses lm_head / embed_tokens, so DeepSeek's MTP layout may not hold
        Arch(
            "Glm4MoeForCausalLM",
            ("glm4_moe",),
            "gqa",
            moe="deepseek",
            qk_norm="use_qk_norm",
            o_bias=False,
            router_bias=True,
        ),
        Arch("DeepseekV2ForCausalLM", ("deepseek_v2",), "mla", moe="deepseek"),
        Arch("DeepseekV3ForCausalLM", ("deepseek_v3",), "mla", moe="deepseek", router_bias=True, mtp=True),
    )
}

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(sorted(ARCHITECTURES))
BY_MODEL_TYPE = {mt: a for a in ARCHITECTURES.values() for mt in a.model_types}
