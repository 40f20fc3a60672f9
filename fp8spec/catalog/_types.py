"""Public value types of the model catalog: errors and :class:`ModelFacts` (:class:`LinearModule` is in _linear)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ._linear import LINEAR_KINDS, PARALLEL_STYLES, LinearModule

if TYPE_CHECKING:  # pragma: no cover
    from ._layout import Layout

__all__ = [
    "LINEAR_KINDS",
    "PARALLEL_STYLES",
    "CatalogError",
    "ConfigError",
    "LinearModule",
    "ModelFacts",
    "UnknownModel",
    "VisionTower",
]


class CatalogError(Exception):
    """Base class of the catalog's errors. ``str(err)`` is a complete, user-facing sentence."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UnknownModel(CatalogError, LookupError):
    """``get_model`` was asked for an id the catalog does not hold.

    ``name`` is what was asked for, ``suggestions`` the close catalog ids (best first, maybe empty),
    ``known`` every catalog id.
    """

    def __init__(self, name: object, suggestions: list[str] | None = None, known: list[str] | None = None):
        self.name = name
        self.suggestions = list(suggestions or [])
        self.known = list(known or [])
        parts = [f"unknown model {name!r}"]
        if self.suggestions:
            parts[0] += "; did you mean " + " or ".join(repr(s) for s in self.suggestions) + "?"
        if self.known:
            parts.append("catalog models: " + ", ".join(self.known))
        parts.append("for any other model set model.config_path to a local Hugging Face config.json")
        super().__init__("; ".join(parts))


class ConfigError(CatalogError, ValueError):
    """A config.json could not be turned into :class:`ModelFacts` (unreadable, malformed, missing keys,
    unsupported architecture, implausible values). ``path`` is the file (or None), ``key`` the offending
    config key when there is one."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None):
        self.path = path
        self.key = key
        super().__init__(message)


# --- model facts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VisionTower:
    """The SigLIP vision encoder of a multimodal checkpoint (Gemma 3), and the projector into the decoder.

    Its linears (``ModelFacts.vision_linear_modules()``) sit under ``vision_tower.vision_model.``; vLLM 0.24
    builds them with the model's quant_config (gemma3_mm.py), so an FP8 checkpoint quantizes them too.
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    image_size: int
    patch_size: int

    @property
    def num_positions(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class ModelFacts:
    """Everything an FP8 check needs to know about one model, built from its config.json.

    Equality compares every field except ``source``. Module listings are generated lazily and cached;
    list-returning methods hand out fresh lists, so callers may mutate them.

    Conventions (see ``fp8spec/catalog/README.md``):
      * ``head_dim``: config ``head_dim`` or ``hidden_size // num_attention_heads``; for MLA models it is the
        query/key head width ``qk_nope_head_dim + qk_rope_head_dim`` (192 for DeepSeek-V3).
      * dense models have ``num_experts == 0``, ``num_experts_per_tok == 0``, ``moe_intermediate_size is None``,
        ``first_k_dense_layers == 0`` and no MoE layers.
      * ``first_k_dense_layers`` counts the leading dense layers of an MoE model (DeepSeek
        ``first_k_dense_replace``; Qwen3-MoE derived from ``mlp_only_layers``/``decoder_sparse_step``);
        ``moe_layers`` lists exactly which layers are MoE.
      * DeepSeek MTP layers (``num_mtp_layers``) are left out of every listing unless ``include_mtp=True``.
      * a tied ``lm_head`` is still listed, with ``LinearModule.tied = True``.
    """

    id: str
    architecture: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int | None
    shared_expert_intermediate_size: int | None
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    num_experts: int
    num_experts_per_tok: int
    first_k_dense_layers: int
    vocab_size: int
    tie_word_embeddings: bool
    attention: str  # "gqa" | "mla"
    # MLA (DeepSeek) only; None for GQA models. q_lora_rank may be None for MLA too (DeepSeek-V2-Lite).
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_shared_experts: int = 0
    moe_layers: tuple[int, ...] = ()
    qkv_bias: bool = False
    o_proj_bias: bool = False
    # q_norm/k_norm per head before RoPE (Qwen3, Gemma 3, GLM-4.5 with use_qk_norm); the layout lists
    # self_attn.q_norm / k_norm exactly when it is True. False for MLA: kv_a_layernorm is a latent norm.
    qk_norm: bool = False
    num_mtp_layers: int = 0
    max_position_embeddings: int | None = None
    # quantization_config.quant_method of a checkpoint stored quantized (e.g. "fp8"); None for BF16/FP16 weights
    quantization: str | None = None
    # checkpoint naming (see _arch.py): where the decoder sits, what the router and routed experts are called
    module_prefix: str = "model."
    lm_head_name: str = "lm_head"
    moe_block: str = "mlp"  # Mixtral: block_sparse_moe
    expert_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")  # gate, up, down
    router_bias: bool = False  # e_score_correction_bias [E] (DeepSeek-V3, GLM-4.5)
    extra_norms: tuple[str, ...] = ()  # per-layer norms besides input_/post_attention_layernorm (Gemma 3)
    # attention window: layers that attend over the last sliding_window tokens only (Gemma 3: 5 of every 6)
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    vision: VisionTower | None = None
    source: str = field(default="", compare=False)

    # -- derived ---------------------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and bool(self.moe_layers)

    @property
    def dense_layers(self) -> tuple[int, ...]:
        moe = set(self.moe_layers)
        return tuple(i for i in range(self.num_hidden_layers) if i not in moe)

    def is_moe_layer(self, layer: int) -> bool:
        return layer in self._moe_layer_set

    @cached_property
    def _moe_layer_set(self) -> frozenset[int]:
        return frozenset(self.moe_layers)

    @property
    def q_size(self) -> int:
        """Output width of the query projection (q_proj / q_b_proj)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Output width of k_proj (= v_proj) for GQA models; for MLA the compressed kv width
        ``kv_lora_rank + qk_rope_head_dim`` (what the MLA KV cache stores per token)."""
        if self.attention == "mla":
            return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        return self.num_key_value_heads * self.head_dim

    # -- module listings -------------------------------------------------------------------------------

    def _layout(self, include_mtp: bool) -> Layout:
        return self._layout_mtp if include_mtp else self._layout_main

    @cached_property
    def _layout_main(self) -> Layout:
        from ._layout import build_layout

        return build_layout(self, include_mtp=False)

    @cached_property
    def _layout_mtp(self) -> Layout:
        from ._layout import build_layout

        return build_layout(self, include_mtp=True)

    def linear_modules(self, include_mtp: bool = False) -> list[LinearModule]:
        """Every linear weight of the language model, in checkpoint order (layer by layer), ``lm_head`` last.

        A multimodal checkpoint's vision encoder is not here (its linears have no decoder layer): see
        :meth:`vision_linear_modules`."""
        return list(self._layout(include_mtp).linears)

    def vision_linear_modules(self) -> list[LinearModule]:
        """The vision encoder's linears (``kind`` ``vision_*``, ``layer`` None); empty for a text-only model."""
        return list(self._layout_main.vision_linears)

    def module_names(self, include_mtp: bool = False) -> list[str]:
        """Every checkpoint module that owns weights: linears, embeddings and norms (no containers)."""
        return list(self._layout(include_mtp).names)

    def symbolic_groups(self, include_mtp: bool = False) -> dict[str, list[str]]:
        """``lm_head``, ``embeddings``, ``norms``, ``router`` -> the module names each covers."""
        lay = self._layout(include_mtp)
        return {
            "lm_head": list(lay.lm_heads),
            "embeddings": list(lay.embeddings),
            "norms": list(lay.norms),
            "router": list(lay.routers),
        }

    def fused_groups(self) -> dict[str, list[str]]:
        """Fused group name -> member suffixes for this architecture.

        ``qkv_proj``/``gate_up_proj``/``fused_qkv_a_proj`` members are the last name component of modules
        that share one parent (``...self_attn.q_proj`` etc.; ``gate_up_proj`` also covers shared experts).
        ``experts`` (MoE only) is the engines' ``FusedMoE``: its members are the per-expert suffixes under
        ``mlp.experts.{j}``, and one group spans *all* experts of a layer. Use ``LinearModule.fused_name`` or
        :meth:`fused_instances` to get concrete groups.
        """
        from ._layout import fused_groups

        return {k: list(v) for k, v in fused_groups(self).items()}

    def fused_instances(self, include_mtp: bool = False) -> dict[str, list[str]]:
        """Concrete fused module name (``model.layers.0.self_attn.qkv_proj``, ``model.layers.3.mlp.experts``)
        -> the checkpoint module names fused into it."""
        return {k: list(v) for k, v in self._layout(include_mtp).fused.items()}

    def linear_module(self, name: str, include_mtp: bool = False) -> LinearModule | None:
        """The linear called ``name`` or None (MTP modules only with ``include_mtp=True``)."""
        return self._layout(include_mtp).by_name.get(name)

    def num_parameters(self, include_mtp: bool = False) -> int:
        """Parameter count of the checkpoint (tied ``lm_head`` counted once), from the module shapes."""
        return self._layout(include_mtp).num_parameters

    def config_summary(self) -> dict[str, object]:
        """A small JSON-serialisable dict for display."""
        out: dict[str, object] = {
            "id": self.id,
            "architecture": self.architecture,
            "attention": self.attention,
            "layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "heads": self.num_attention_heads,
            "kv_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "qk_norm": self.qk_norm,
        }
        if self.sliding_window is not None and self.sliding_layers:
            out.update(sliding_window=self.sliding_window, sliding_layers=len(self.sliding_layers))
        if self.vision is not None:
            out["vision_layers"] = self.vision.num_hidden_layers
        if self.is_moe:
            out.update(
                experts=self.num_experts,
                experts_per_tok=self.num_experts_per_tok,
                moe_intermediate_size=self.moe_intermediate_size,
                moe_layers=len(self.moe_layers),
                first_k_dense_layers=self.first_k_dense_layers,
            )
            if self.shared_expert_intermediate_size:
                out["shared_expert_intermediate_size"] = self.shared_expert_intermediate_size
        if self.attention == "mla":
            out.update(
                q_lora_rank=self.q_lora_rank,
                kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim,
                qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
            )
        if self.num_mtp_layers:
            out["mtp_layers"] = self.num_mtp_layers
        if self.quantization:
            out["stored_quantized"] = self.quantization
        out["parameters_b"] = round(self.num_parameters() / 1e9, 2)
        return out
