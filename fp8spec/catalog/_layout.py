"""Checkpoint module layout per architecture family: every linear, norm and embedding with its name.

Names are Hugging Face checkpoint keys without ``.weight`` (what ``safetensors`` index files list), not the
live module paths of any runtime: transformers v5 fuses experts into 3-D ``experts.gate_up_proj`` params and
vLLM into ``FusedMoE``, but checkpoints on disk keep one key per expert.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from ._linear import LinearModule

if TYPE_CHECKING:  # pragma: no cover
    from ._types import ModelFacts

# template rows -----------------------------------------------------------------------------------------
# linear: ("L", suffix, kind, out, in, parallel, group, fused_suffix, bias)
# vision: ("V", ...)   a linear of the vision encoder (same fields; listed apart from the decoder's linears)
# norm:   ("N", suffix, width)
# embed:  ("E", suffix, rows)            rows x hidden_size
# other:  ("X", suffix, numel, category) explicit parameter count; category "norms", "embeddings" or None


class Layout:
    __slots__ = (
        "_by_name",
        "embeddings",
        "fused",
        "linears",
        "lm_heads",
        "names",
        "norms",
        "num_parameters",
        "routers",
        "vision_linears",
    )

    def __init__(self) -> None:
        self.linears: tuple[LinearModule, ...] = ()
        self.names: tuple[str, ...] = ()
        self.norms: tuple[str, ...] = ()
        self.embeddings: tuple[str, ...] = ()
        self.routers: tuple[str, ...] = ()
        self.lm_heads: tuple[str, ...] = ()
        self.vision_linears: tuple[LinearModule, ...] = ()
        self.fused: dict[str, tuple[str, ...]] = {}
        self.num_parameters = 0
        self._by_name: dict[str, LinearModule] | None = None

    @property
    def by_name(self) -> dict[str, LinearModule]:
        if self._by_name is None:
            self._by_name = {m.name: m for m in self.linears}
        return self._by_name


def fused_groups(f: ModelFacts) -> dict[str, tuple[str, ...]]:
    groups: dict[str, tuple[str, ...]] = {}
    if f.attention == "gqa":
        groups["qkv_proj"] = ("q_proj", "k_proj", "v_proj")
    elif f.q_lora_rank is not None:
        groups["fused_qkv_a_proj"] = ("q_a_proj", "kv_a_proj_with_mqa")
    groups["gate_up_proj"] = ("gate_proj", "up_proj")
    if f.is_moe:
        groups["experts"] = f.expert_names
    return groups


def _attention_rows(f: ModelFacts) -> list[tuple]:
    h = f.hidden_size
    if f.attention == "gqa":
        q, kv = f.q_size, f.kv_size
        rows: list[tuple] = [
            (
                "L",
                "self_attn.q_proj",
                "attn_qkv",
                q,
                h,
                "column",
                "qkv_proj",
                "self_attn.qkv_proj",
                f.qkv_bias,
            ),
            (
                "L",
                "self_attn.k_proj",
                "attn_qkv",
                kv,
                h,
                "column",
                "qkv_proj",
                "self_attn.qkv_proj",
                f.qkv_bias,
            ),
            (
                "L",
                "self_attn.v_proj",
                "attn_qkv",
                kv,
                h,
                "column",
                "qkv_proj",
                "self_attn.qkv_proj",
                f.qkv_bias,
            ),
            ("L", "self_attn.o_proj", "attn_out", h, q, "row", None, None, f.o_proj_bias),
        ]
        if f.qk_norm:
            rows += [("N", "self_attn.q_norm", f.head_dim), ("N", "self_attn.k_norm", f.head_dim)]
        return rows
    # MLA (DeepSeek-V2/V3): the parser sets every MLA width
    nope, rope, v_dim, kv_lora = f.qk_nope_head_dim, f.qk_rope_head_dim, f.v_head_dim, f.kv_lora_rank
    assert nope is not None and rope is not None and v_dim is not None and kv_lora is not None
    heads = f.num_attention_heads
    qk_head = nope + rope
    kv_a_out = kv_lora + rope
    bias = f.o_proj_bias  # DeepSeek's attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj
    rows = []
    grp: str | None = None
    fsuf: str | None = None
    if f.q_lora_rank is not None:
        grp, fsuf = "fused_qkv_a_proj", "self_attn.fused_qkv_a_proj"
        rows += [
            ("L", "self_attn.q_a_proj", "mla_q_a", f.q_lora_rank, h, "replicated", grp, fsuf, bias),
            ("N", "self_attn.q_a_layernorm", f.q_lora_rank),
            (
                "L",
                "self_attn.q_b_proj",
                "mla_q_b",
                heads * qk_head,
                f.q_lora_rank,
                "column",
                None,
                None,
                False,
            ),
        ]
    else:
        rows.append(("L", "self_attn.q_proj", "mla_q", heads * qk_head, h, "column", None, None, False))
    rows += [
        ("L", "self_attn.kv_a_proj_with_mqa", "mla_kv_a", kv_a_out, h, "replicated", grp, fsuf, bias),
        ("N", "self_attn.kv_a_layernorm", kv_lora),
        (
            "L",
            "self_attn.kv_b_proj",
            "mla_kv_b",
            heads * (nope + v_dim),
            kv_lora,
            "column",
            None,
            None,
            False,
        ),
        ("L", "self_attn.o_proj", "attn_out", h, heads * v_dim, "row", None, None, bias),
    ]
    return rows


def _dense_mlp_rows(f: ModelFacts) -> list[tuple]:
    h, i = f.hidden_size, f.intermediate_size
    return [
        ("L", "mlp.gate_proj", "mlp_in", i, h, "column", "gate_up_proj", "mlp.gate_up_proj", False),
        ("L", "mlp.up_proj", "mlp_in", i, h, "column", "gate_up_proj", "mlp.gate_up_proj", False),
        ("L", "mlp.down_proj", "mlp_out", h, i, "row", None, None, False),
    ]


def _shared_expert_rows(f: ModelFacts) -> list[tuple]:
    if not f.shared_expert_intermediate_size:
        return []
    h, s = f.hidden_size, f.shared_expert_intermediate_size
    fsuf = "mlp.shared_experts.gate_up_proj"
    return [
        (
            "L",
            "mlp.shared_experts.gate_proj",
            "shared_expert_in",
            s,
            h,
            "column",
            "gate_up_proj",
            fsuf,
            False,
        ),
        ("L", "mlp.shared_experts.up_proj", "shared_expert_in", s, h, "column", "gate_up_proj", fsuf, False),
        ("L", "mlp.shared_experts.down_proj", "shared_expert_out", h, s, "row", None, None, False),
    ]


def _vision_rows(f: ModelFacts) -> list[tuple]:
    """SigLIP encoder + Gemma 3 projector, under their released checkpoint names (transformers
    modeling_siglip.py / modeling_gemma3.py; vLLM siglip.py fuses q/k/v into qkv_proj)."""
    v = f.vision
    if v is None:
        return []
    h, i = v.hidden_size, v.intermediate_size
    p = "vision_tower.vision_model."
    rows: list[tuple] = [
        ("X", p + "embeddings.patch_embedding", h * v.num_channels * v.patch_size**2 + h, "embeddings"),
        ("X", p + "embeddings.position_embedding", v.num_positions * h, "embeddings"),
    ]
    for n in range(v.num_hidden_layers):
        lp = f"{p}encoder.layers.{n}."
        fsuf = "self_attn.qkv_proj"
        rows += [
            ("X", lp + "layer_norm1", 2 * h, "norms"),
            *(
                (
                    "V",
                    f"{lp}self_attn.{x}_proj",
                    "vision_attn_qkv",
                    h,
                    h,
                    "column",
                    "qkv_proj",
                    lp + fsuf,
                    True,
                )
                for x in "qkv"
            ),
            ("V", lp + "self_attn.out_proj", "vision_attn_out", h, h, "row", None, None, True),
            ("X", lp + "layer_norm2", 2 * h, "norms"),
            ("V", lp + "mlp.fc1", "vision_mlp_in", i, h, "column", None, None, True),
            ("V", lp + "mlp.fc2", "vision_mlp_out", h, i, "row", None, None, True),
        ]
    rows += [
        ("X", p + "post_layernorm", 2 * h, "norms"),
        # a bare [vision hidden, text hidden] parameter (mm_input_projection_weight), not a Linear
        ("X", "multi_modal_projector", h * f.hidden_size, None),
        ("X", "multi_modal_projector.mm_soft_emb_norm", h, "norms"),
    ]
    return rows


def build_layout(f: ModelFacts, *, include_mtp: bool) -> Layout:
    # Tens of thousands of small tuples: pausing the cyclic GC keeps generation linear (it would otherwise
    # rescan every live object of the process several times). Nothing built here forms a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _build_layout(f, include_mtp=include_mtp)
    finally:
        if enabled:
            gc.enable()


def _build_layout(f: ModelFacts, *, include_mtp: bool) -> Layout:
    h = f.hidden_size
    attn = _attention_rows(f)
    dense = _dense_mlp_rows(f)
    shared = _shared_expert_rows(f)
    moe_set = set(f.moe_layers)
    E, m = f.num_experts, f.moe_intermediate_size or 0  # read only for a MoE layer, where it is set
    gate_name, up_name, down_name = f.expert_names
    expert_rows = (
        (gate_name, "expert_in", m, h, "column"),
        (up_name, "expert_in", m, h, "column"),
        (down_name, "expert_out", h, m, "row"),
    )
    extra_norms = [("N", n, h) for n in f.extra_norms]

    linears: list[LinearModule] = []
    names: list[str] = []
    norms: list[str] = []
    embeddings: list[str] = []
    routers: list[str] = []
    lm_heads: list[str] = []
    vision: list[LinearModule] = []
    fused: dict[str, list[str]] = {}
    params = 0
    LM = LinearModule
    new_lm = tuple.__new__  # skips NamedTuple.__new__'s argument handling: ~2x faster for experts

    def emit_rows(prefix: str, layer: int, rows: list[tuple]) -> None:
        nonlocal params
        for row in rows:
            tag = row[0]
            name = prefix + row[1]
            names.append(name)
            if tag == "L":
                _, _, kind, out, inn, par, grp, fsuf, bias = row
                linears.append(LM(name, layer, kind, out, inn, par, grp, None, False, bias))
                params += out * inn + (out if bias else 0)
                if fsuf is not None:
                    fused.setdefault(prefix + fsuf, []).append(name)
            elif tag == "V":
                _, _, kind, out, inn, par, grp, _fsuf, bias = row
                vision.append(LM(name, None, kind, out, inn, par, grp, None, False, bias))
                params += out * inn + (out if bias else 0)
            elif tag == "N":
                norms.append(name)
                params += row[2]
            elif tag == "E":
                embeddings.append(name)
                params += row[2] * h
            else:  # "X"
                params += row[2]
                if row[3] == "norms":
                    norms.append(name)
                elif row[3] == "embeddings":
                    embeddings.append(name)

    def emit_layer(i: int, *, mtp: bool) -> None:
        nonlocal params
        prefix = f"{f.module_prefix}layers.{i}."
        if mtp:
            emit_rows(
                prefix,
                i,
                [
                    ("E", "embed_tokens", f.vocab_size),
                    ("N", "enorm", h),
                    ("N", "hnorm", h),
                    ("L", "eh_proj", "mtp_eh_proj", h, 2 * h, "replicated", None, None, False),
                ],
            )
        emit_rows(prefix, i, [("N", "input_layernorm", h)])
        emit_rows(prefix, i, attn)
        emit_rows(prefix, i, [("N", "post_attention_layernorm", h), *extra_norms])
        # an MTP layer repeats the main model's (MoE) decoder layer: README_WEIGHTS.md "structure identical"
        if i in moe_set or (mtp and f.is_moe):
            gate = f"{prefix}{f.moe_block}.gate"
            names.append(gate)
            routers.append(gate)
            linears.append(LM(gate, i, "router", E, h, "replicated", None, None, False, False))
            params += E * h + (E if f.router_bias else 0)
            ep = f"{prefix}{f.moe_block}.experts."
            block = [
                new_lm(LM, (f"{ep}{j}.{suf}", i, kind, out, inn, par, "experts", j, False, False))
                for j in range(E)
                for suf, kind, out, inn, par in expert_rows
            ]
            linears.extend(block)
            block_names = [m[0] for m in block]
            names.extend(block_names)
            fused[f"{prefix}{f.moe_block}.experts"] = block_names
            params += E * 3 * m * h
            emit_rows(prefix, i, shared)
        else:
            emit_rows(prefix, i, dense)
        if mtp:
            emit_rows(
                prefix,
                i,
                [
                    ("N", "shared_head.norm", h),
                    ("L", "shared_head.head", "lm_head", f.vocab_size, h, "column", None, None, False),
                ],
            )
            lm_heads.append(prefix + "shared_head.head")

    emit_rows(f.module_prefix, -1, [("E", "embed_tokens", f.vocab_size)])
    for i in range(f.num_hidden_layers):
        emit_layer(i, mtp=False)
    if include_mtp:
        for k in range(f.num_mtp_layers):
            emit_layer(f.num_hidden_layers + k, mtp=True)
    emit_rows(f.module_prefix, -1, [("N", "norm", h)])
    emit_rows("", -1, _vision_rows(f))
    names.append(f.lm_head_name)
    lm_heads.append(f.lm_head_name)
    linears.append(
        LM(
            f.lm_head_name,
            None,
            "lm_head",
            f.vocab_size,
            h,
            "column",
            None,
            None,
            f.tie_word_embeddings,
            False,
        )
    )
    if not f.tie_word_embeddings:
        params += f.vocab_size * h

    lay = Layout()
    lay.linears = tuple(linears)
    lay.names = tuple(names)
    lay.norms = tuple(norms)
    lay.embeddings = tuple(embeddings)
    lay.routers = tuple(routers)
    lay.lm_heads = tuple(lm_heads)
    lay.vision_linears = tuple(vision)
    lay.fused = {k: tuple(v) for k, v in fused.items()}
    lay.num_parameters = params
    return lay
