"""One linear weight of a checkpoint (:class:`LinearModule`), and the values its fields take.

Its own module because both the model facts (_types) and the layouts that list the linears (_layout) use it.
"""

from __future__ import annotations

from typing import NamedTuple

# --- linear modules -----------------------------------------------------------------------------------

#: every value ``LinearModule.kind`` can take
LINEAR_KINDS: tuple[str, ...] = (
    "attn_qkv",  # q_proj / k_proj / v_proj (GQA)
    "attn_out",  # o_proj (GQA and MLA)
    "mla_q",  # DeepSeek q_proj when q_lora_rank is null (V2-Lite)
    "mla_q_a",  # DeepSeek q_a_proj (hidden -> q_lora_rank)
    "mla_q_b",  # DeepSeek q_b_proj (q_lora_rank -> heads * (qk_nope + qk_rope))
    "mla_kv_a",  # DeepSeek kv_a_proj_with_mqa (hidden -> kv_lora_rank + qk_rope)
    "mla_kv_b",  # DeepSeek kv_b_proj (kv_lora_rank -> heads * (qk_nope + v))
    "mlp_in",  # dense gate_proj / up_proj
    "mlp_out",  # dense down_proj
    "expert_in",  # routed expert gate_proj / up_proj
    "expert_out",  # routed expert down_proj
    "shared_expert_in",  # shared expert gate_proj / up_proj
    "shared_expert_out",  # shared expert down_proj
    "router",  # mlp.gate (expert router)
    "lm_head",  # output projection (also DeepSeek MTP shared_head.head)
    "mtp_eh_proj",  # DeepSeek MTP eh_proj (2*hidden -> hidden)
    "vision_attn_qkv",  # vision encoder q_proj / k_proj / v_proj (vLLM fuses them into qkv_proj)
    "vision_attn_out",  # vision encoder out_proj
    "vision_mlp_in",  # vision encoder fc1
    "vision_mlp_out",  # vision encoder fc2
)

#: how tensor parallelism splits a linear in vLLM / SGLang / Megatron
PARALLEL_STYLES: tuple[str, ...] = ("column", "row", "replicated")


class LinearModule(NamedTuple):
    """One linear weight of the checkpoint.

    ``name`` is the checkpoint key without ``.weight``. ``layer`` is the decoder layer index (None for
    ``lm_head`` and a vision encoder's linears). ``out_features``/``in_features`` are the weight's ``[out, in]`` shape (as in
    ``nn.Linear``). ``parallel`` says how tensor parallelism splits it: ``column`` splits ``out_features``,
    ``row`` splits ``in_features``, ``replicated`` is not split. ``group`` is the fused module the serving
    engines build from it (``qkv_proj``, ``gate_up_proj``, ``fused_qkv_a_proj``, ``experts``) or None;
    all members of one fused module must share one precision. ``expert`` is the routed-expert index,
    ``tied`` marks an ``lm_head`` that shares the embedding weight (``tie_word_embeddings``), ``bias``
    whether the checkpoint also has a ``.bias`` for it.
    """

    name: str
    layer: int | None
    kind: str
    out_features: int
    in_features: int
    parallel: str
    group: str | None
    expert: int | None = None
    tied: bool = False
    bias: bool = False

    @property
    def fused_name(self) -> str | None:
        """The engine-side module this weight is fused into, e.g. ``model.layers.0.self_attn.qkv_proj``,
        ``model.layers.3.mlp.gate_up_proj`` or, for every routed expert of a layer, ``model.layers.3.mlp.experts``
        (vLLM/SGLang ``FusedMoE``). None when the module is not fused."""
        if self.group is None:
            return None
        if self.group == "experts":
            head, sep, _ = self.name.rpartition(".experts.")
            return head + ".experts" if sep else None
        return self.name.rpartition(".")[0] + "." + self.group

    @property
    def numel(self) -> int:
        return self.out_features * self.in_features

    @property
    def suffix(self) -> str:
        """Last component of the name: ``q_proj``, ``gate``, ``down_proj``, ``lm_head`` ..."""
        return self.name.rpartition(".")[2]
