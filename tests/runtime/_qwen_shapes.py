"""Checkpoint names/shapes of a Qwen3 / Qwen3-MoE config and a stand-in for the ENGINE's destination parameters only
(names and shapes as vLLM 0.24.0's Fp8LinearMethod / Fp8MoEMethod create them for block-FP8, per TP rank)."""

from __future__ import annotations

import re

import yaml

CATALOG = {"qwen3-8b": "Qwen--Qwen3-8B-Base", "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B-Base"}


def catalog_config(case: str) -> dict:
    from pathlib import Path

    import fp8spec

    path = Path(fp8spec.__file__).parent / "catalog" / "models" / f"{CATALOG[case]}.yaml"
    cfg = dict(yaml.safe_load(path.read_text(encoding="utf-8"))["config"])
    return {
        k: float(v) if isinstance(v, str) and re.fullmatch(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", v) else v
        for k, v in cfg.items()
    }


def _dims(cfg: dict) -> tuple[int, int, int, int, int]:
    """hidden size, head dim, query heads, key/value heads, vocabulary."""
    keys = ("hidden_size", "head_dim", "num_attention_heads", "num_key_value_heads", "vocab_size")
    return tuple(cfg[k] for k in keys)  # type: ignore[return-value]


def checkpoint(cfg: dict) -> dict[str, tuple[int, ...]]:
    """HF checkpoint names -> shapes, in the order an HF model's state_dict yields them."""
    h, d, nh, nkv, v = _dims(cfg)
    out = {"model.embed_tokens.weight": (v, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update(
            {
                p + "self_attn.q_proj.weight": (nh * d, h),
                p + "self_attn.k_proj.weight": (nkv * d, h),
                p + "self_attn.v_proj.weight": (nkv * d, h),
                p + "self_attn.o_proj.weight": (h, nh * d),
                p + "self_attn.q_norm.weight": (d,),
                p + "self_attn.k_norm.weight": (d,),
            }
        )
        if cfg.get("num_experts"):
            m = cfg["moe_intermediate_size"]
            out[p + "mlp.gate.weight"] = (cfg["num_experts"], h)
            for j in range(cfg["num_experts"]):
                e = f"{p}mlp.experts.{j}."
                out.update(
                    {
                        e + "gate_proj.weight": (m, h),
                        e + "up_proj.weight": (m, h),
                        e + "down_proj.weight": (h, m),
                    }
                )
        else:
            m = cfg["intermediate_size"]
            out.update(
                {
                    p + "mlp.gate_proj.weight": (m, h),
                    p + "mlp.up_proj.weight": (m, h),
                    p + "mlp.down_proj.weight": (h, m),
                }
            )
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)})
    out.update({"model.norm.weight": (h,), "lm_head.weight": (v, h)})
    return out


def _cdiv(a, b):
    return -(-a // b)


def engine_params(cfg: dict, tp: int = 1, block=(128, 128)) -> tuple[dict, dict]:
    """(name -> (shape, dtype name)) of the engine's parameters at one TP rank, and the fused layers' part rows."""
    h, d, nh, nkv, v = _dims(cfg)
    bm, bn = block
    params: dict = {
        "model.embed_tokens.weight": ((v // tp, h), "bfloat16"),
        "lm_head.weight": ((v // tp, h), "bfloat16"),
        "model.norm.weight": ((h,), "bfloat16"),
    }
    parts: dict = {}

    def fp8(name, rows, cols, lead=()):
        params[name + ".weight"] = ((*lead, rows, cols), "float8_e4m3fn")
        params[name + ".weight_scale_inv"] = ((*lead, _cdiv(rows, bm), _cdiv(cols, bn)), "float32")

    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        fp8(p + "self_attn.qkv_proj", (nh + 2 * nkv) * d // tp, h)
        parts[p + "self_attn.qkv_proj"] = [nh * d, nkv * d, nkv * d]
        fp8(p + "self_attn.o_proj", h, nh * d // tp)
        for n_ in ("self_attn.q_norm", "self_attn.k_norm"):
            params[p + n_ + ".weight"] = ((d,), "bfloat16")
        for n_ in ("input_layernorm", "post_attention_layernorm"):
            params[p + n_ + ".weight"] = ((h,), "bfloat16")
        if cfg.get("num_experts"):
            e, m = cfg["num_experts"], cfg["moe_intermediate_size"] // tp
            params[p + "mlp.gate.weight"] = ((e, h), "bfloat16")
            r = p + "mlp.experts.routed_experts."
            params[r + "w13_weight"] = ((e, 2 * m, h), "float8_e4m3fn")
            params[r + "w13_weight_scale_inv"] = ((e, 2 * _cdiv(m, bm), _cdiv(h, bn)), "float32")
            params[r + "w2_weight"] = ((e, h, m), "float8_e4m3fn")
            params[r + "w2_weight_scale_inv"] = ((e, _cdiv(h, bm), _cdiv(m, bn)), "float32")
        else:
            m = cfg["intermediate_size"]
            fp8(p + "mlp.gate_up_proj", 2 * m // tp, h)
            parts[p + "mlp.gate_up_proj"] = [m, m]
            fp8(p + "mlp.down_proj", h, m // tp)
    return params, parts


# the weight loaders vLLM 0.24.0 gives the engine's unquantized parameters (tests/runtime/_vllm_tables.py checks
# each against the wheel): embeddings and ParallelLMHead inherit VocabParallelEmbedding.weight_loader, the MoE
# router is a ReplicatedLinear, RMSNorm's weight has none (vLLM then uses default_weight_loader)
EMBEDDING_LOADER = "VocabParallelEmbedding.weight_loader"
ROUTER_LOADER = "ReplicatedLinear.weight_loader"


def engine_loaders(params: dict) -> dict:
    """Unquantized parameter -> the qualified name of its weight loader (None: vLLM's default), as vLLM assigns."""
    out = {}
    for name, (_, dtype) in params.items():
        if dtype == "float8_e4m3fn" or name.endswith("_scale_inv"):
            continue
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            out[name] = EMBEDDING_LOADER
        elif name.endswith("mlp.gate.weight"):
            out[name] = ROUTER_LOADER
        else:
            out[name] = None
    return out
