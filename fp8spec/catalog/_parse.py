"""config.json (as a dict) -> :class:`ModelFacts`. One code path for catalog entries and user files.

The architecture table (what each config key is called, how modules are named) is data in ``_arch``;
reading files is ``_files``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ._arch import ARCHITECTURES, BY_MODEL_TYPE, SUPPORTED_ARCHITECTURES, Arch
from ._types import ConfigError, ModelFacts, VisionTower

#: plausibility bounds; they keep module listings finite and arithmetic meaningful
MAX_DIM = 2**31 - 1
MAX_LAYERS = 4096
MAX_EXPERTS = 65536
# layers x experts: Kimi K2 (61 x 384 = 23,424) and DeepSeek-V3 (61 x 256) with room. It bounds what
# validation walks once per model (benchmarks/bench_validate_bounds.py, docs/results.md: the worst config
# inside these bounds validates within the 2 s / 500 MB target)
MAX_EXPERT_MODULES = 32_768

_MISSING = object()


def _supported_sentence() -> str:
    return "supported architectures: " + ", ".join(SUPPORTED_ARCHITECTURES)


def type_name(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, float):
        return "a number with a fraction" if not float(v).is_integer() else "a float"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _show(v: object) -> str:
    text = json.dumps(v) if isinstance(v, (str, int, float, bool, type(None))) else type_name(v)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """Typed access to config keys, with errors that name the file, the key and what was expected.

    ``defaults`` are the values transformers' config class fills in for keys a config.json omits (Gemma 3's
    multimodal configs rely on them); ``prefix`` locates a nested section (``text_config.``) in messages.
    """

    def __init__(
        self,
        cfg: dict,
        where: str,
        arch: str,
        path: str | None,
        defaults: Mapping[str, object] | None = None,
        prefix: str = "",
    ):
        self.cfg, self.where, self.arch, self.path = cfg, where, arch, path
        self.defaults = defaults or {}
        self.prefix = prefix

    def fail(self, msg: str, key: str | None = None) -> ConfigError:
        return ConfigError(f"{self.where}: {msg}", path=self.path, key=key)

    def _lookup(self, keys: tuple[str, ...]) -> tuple[str, object]:
        for k in keys:
            if k in self.cfg:
                return self.prefix + k, self.cfg[k]
        if keys[0] in self.defaults:
            return self.prefix + keys[0], self.defaults[keys[0]]
        return self.prefix + keys[0], _MISSING

    def maybe_integer(
        self,
        *keys: str,
        default: object = _MISSING,
        minimum: int = 1,
        maximum: int = MAX_DIM,
        nullable: bool = False,
    ) -> int | None:
        key, v = self._lookup(keys)
        if v is _MISSING or (v is None and default is not _MISSING and not nullable):
            if default is _MISSING:
                alt = f" (or {', '.join(repr(self.prefix + k) for k in keys[1:])})" if len(keys) > 1 else ""
                raise self.fail(f"missing required key {key!r}{alt} for {self.arch}", key)
            return default  # type: ignore[return-value]
        if v is None and nullable:
            return None
        if v is None:
            raise self.fail(f"{key!r} must be an integer, got null", key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{key!r} must be an integer, got {_show(v)} ({type_name(v)})", key)
        if v < minimum:
            raise self.fail(f"{key!r} must be >= {minimum}, got {v}", key)
        if v > maximum:
            raise self.fail(f"{key!r} = {v} is implausibly large (limit {maximum})", key)
        return v

    def integer(
        self, *keys: str, default: int | object = _MISSING, minimum: int = 1, maximum: int = MAX_DIM
    ) -> int:
        """A required integer (or ``default``, an int)."""
        value = self.maybe_integer(*keys, default=default, minimum=minimum, maximum=maximum)
        assert value is not None  # not nullable, and the default is an int
        return value

    def boolean(self, key: str, default: bool) -> bool:
        shown, v = self._lookup((key,))
        if v is None or v is _MISSING:
            return default
        if not isinstance(v, bool):
            raise self.fail(f"{shown!r} must be true or false, got {_show(v)}", shown)
        return v

    def int_list(self, key: str, *, upper: int) -> list[int]:
        v = self.cfg.get(key, None)
        if v is None:
            return []
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise self.fail(f"{self.prefix + key!r} must be a list of layer indices, got {_show(v)}", key)
        bad = [x for x in v if not 0 <= x < upper]
        if bad:
            raise self.fail(f"{self.prefix + key!r} contains {bad[0]}, outside layers 0..{upper - 1}", key)
        return v

    def section(self, key: str, defaults: Mapping[str, object]) -> "_Reader":
        """A reader over the nested object ``key`` (``text_config``, ``vision_config``)."""
        v = self.cfg.get(key)
        if not isinstance(v, dict):
            got = "missing" if v is None else f"{type_name(v)}, not an object"
            raise self.fail(f"{key!r} is {got}; {self.arch} keeps its settings there", key)
        return _Reader(v, self.where, self.arch, self.path, defaults, prefix=f"{key}.")


def resolve_architecture(cfg: dict, where: str, path: str | None = None) -> Arch:
    """Pick the supported architecture a config describes (``architectures``, else ``model_type``)."""
    archs = cfg.get("architectures")
    model_type = cfg.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(
            f"{where}: 'model_type' must be a string, got {_show(model_type)}", path=path, key="model_type"
        )
    if archs is not None:
        if isinstance(archs, str):
            archs = [archs]
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise ConfigError(
                f"{where}: 'architectures' must be a list of class names, got {_show(archs)}",
                path=path,
                key="architectures",
            )
    if archs:
        chosen = next((ARCHITECTURES[a] for a in archs if a in ARCHITECTURES), None)
        if chosen is None:
            raise ConfigError(
                f"{where}: unsupported architecture {', '.join(archs)}; {_supported_sentence()}",
                path=path,
                key="architectures",
            )
        if model_type is not None and model_type not in chosen.model_types:
            raise ConfigError(
                f"{where}: model_type {model_type!r} does not match architecture {chosen.name} "
                f"(expected {' or '.join(repr(t) for t in chosen.model_types)})",
                path=path,
                key="model_type",
            )
        return chosen
    if model_type is None:
        raise ConfigError(
            f"{where}: neither 'architectures' nor 'model_type' is set, so the architecture is unknown; "
            f"{_supported_sentence()}",
            path=path,
            key="architectures",
        )
    if model_type not in BY_MODEL_TYPE:
        raise ConfigError(
            f"{where}: unsupported model_type {model_type!r}; {_supported_sentence()} "
            f"(model_type {', '.join(sorted(BY_MODEL_TYPE))})",
            path=path,
            key="model_type",
        )
    return BY_MODEL_TYPE[model_type]


def facts_from_dict(
    cfg: object, *, model_id: str, source: str, where: str, path: str | None = None
) -> ModelFacts:
    """Build :class:`ModelFacts` from a parsed config.json mapping."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: a config.json must be a JSON object, got {type_name(cfg)}", path=path)
    arch = resolve_architecture(cfg, where, path)
    top = _Reader(cfg, where, arch.name, path)
    r = (
        top.section("text_config", arch.defaults)
        if arch.text_config
        else _Reader(cfg, where, arch.name, path, arch.defaults)
    )

    hidden = r.integer("hidden_size")
    layers = r.integer("num_hidden_layers", maximum=MAX_LAYERS)
    heads = r.integer("num_attention_heads")
    kv_heads = r.integer("num_key_value_heads", default=heads)
    vocab = r.integer("vocab_size")
    intermediate = r.integer("intermediate_size")
    # a multimodal wrapper may say tie_word_embeddings at the top level; the text section wins
    tied = r.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", False))
    max_pos = r.maybe_integer("max_position_embeddings", default=None)
    quantization = _quant_method(top, cfg.get("quantization_config"))
    attention_bias = r.boolean("attention_bias", False)
    qkv_bias = attention_bias if arch.qkv_bias == "attention_bias" else bool(arch.qkv_bias)
    o_bias = attention_bias if arch.o_bias == "attention_bias" else bool(arch.o_bias)
    qk_norm = r.boolean(arch.qk_norm, False) if isinstance(arch.qk_norm, str) else arch.qk_norm

    if heads % kv_heads:
        raise r.fail(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})",
            "num_key_value_heads",
        )

    common: dict[str, Any] = {
        "id": model_id,
        "architecture": arch.name,
        "model_type": arch.model_types[0]
        if not isinstance(cfg.get("model_type"), str)
        else cfg["model_type"],
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "qkv_bias": qkv_bias,
        "o_proj_bias": o_bias,
        "qk_norm": qk_norm,
        "max_position_embeddings": max_pos,
        "quantization": quantization,
        "source": source,
        "module_prefix": arch.prefix,
        "lm_head_name": arch.lm_head,
        "router_bias": arch.router_bias,
        "extra_norms": arch.extra_norms,
        "vision": _vision(top) if arch.vision else None,
    }
    if arch.sliding:
        common.update(_sliding(r, layers))
    if arch.mtp:
        common["num_mtp_layers"] = r.integer(
            "num_nextn_predict_layers", "num_mtp_layers", default=0, minimum=0, maximum=MAX_LAYERS
        )
    moe = _moe(arch, r, layers, intermediate, common.get("num_mtp_layers", 0))

    if arch.family == "gqa":
        head_dim = r.maybe_integer("head_dim", default=None)
        if head_dim is None:
            if hidden % heads:
                raise r.fail(
                    f"no 'head_dim' and hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})",
                    "head_dim",
                )
            head_dim = hidden // heads
        return ModelFacts(attention="gqa", head_dim=head_dim, **common, **moe)

    # MLA: DeepSeek-V2 / V3
    q_lora = r.maybe_integer("q_lora_rank", nullable=True)
    kv_lora = r.integer("kv_lora_rank")
    nope = r.integer("qk_nope_head_dim")
    rope = r.integer("qk_rope_head_dim")
    v_dim = r.integer("v_head_dim")
    return ModelFacts(
        attention="mla",
        head_dim=nope + rope,
        q_lora_rank=q_lora,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=v_dim,
        **common,
        **moe,
    )


_DENSE: dict[str, Any] = {
    "moe_intermediate_size": None,
    "shared_expert_intermediate_size": None,
    "num_shared_experts": 0,
    "num_experts": 0,
    "num_experts_per_tok": 0,
    "first_k_dense_layers": 0,
    "moe_layers": (),
}


def _moe(arch: Arch, r: _Reader, layers: int, intermediate: int, mtp: int) -> dict[str, Any]:
    """The routed-expert fields of ModelFacts (the dense values for a dense model or a MoE model without
    MoE layers)."""
    if arch.moe is None:
        return dict(_DENSE)
    n_shared = 0
    names: dict[str, Any] = {}
    if arch.moe == "qwen3":
        experts = r.integer("num_experts", "num_local_experts", minimum=0, maximum=MAX_EXPERTS)
        if not experts:
            return dict(_DENSE)
        moe_inter = r.integer("moe_intermediate_size")
        top_k = r.integer("num_experts_per_tok", maximum=experts)
        step = r.integer("decoder_sparse_step", default=1, maximum=MAX_LAYERS)
        mlp_only = set(r.int_list("mlp_only_layers", upper=layers))
        # transformers Qwen3MoeDecoderLayer: MoE iff not in mlp_only_layers and (i + 1) % step == 0
        moe_layers = tuple(i for i in range(layers) if i not in mlp_only and (i + 1) % step == 0)
        _check_expert_budget(r, layers, experts)
    elif arch.moe == "mixtral":
        # modeling_mixtral.py MixtralSparseMoeBlock on every layer; experts are intermediate_size wide
        experts = r.integer("num_local_experts", maximum=MAX_EXPERTS)
        moe_inter = intermediate
        top_k = r.integer("num_experts_per_tok", maximum=experts)
        moe_layers = tuple(range(layers))
        _check_expert_budget(r, layers, experts)
        names = {"moe_block": "block_sparse_moe", "expert_names": ("w1", "w3", "w2")}
    else:  # deepseek: DeepSeek-V2/V3, GLM-4.5
        experts = (
            r.maybe_integer(
                "n_routed_experts", "num_local_experts", minimum=0, maximum=MAX_EXPERTS, nullable=True
            )
            or 0
        )
        first_k = r.integer("first_k_dense_replace", minimum=0, maximum=MAX_LAYERS)
        freq = r.integer("moe_layer_freq", default=1, maximum=MAX_LAYERS)
        if not experts:
            return dict(_DENSE)
        moe_inter = r.integer("moe_intermediate_size")
        top_k = r.integer("num_experts_per_tok", maximum=experts)
        n_shared = r.maybe_integer("n_shared_experts", minimum=0, maximum=MAX_EXPERTS, nullable=True) or 0
        # modeling_deepseek / vLLM: MoE iff layer >= first_k_dense_replace and layer % moe_layer_freq == 0
        moe_layers = tuple(i for i in range(layers) if i >= first_k and i % freq == 0)
        _check_expert_budget(r, layers + mtp, experts)
    if not moe_layers:
        return dict(_DENSE)
    return {
        "moe_intermediate_size": moe_inter,
        "shared_expert_intermediate_size": moe_inter * n_shared if n_shared else None,
        "num_shared_experts": n_shared,
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "first_k_dense_layers": moe_layers[0],
        "moe_layers": moe_layers,
        **names,
    }


def _sliding(r: _Reader, layers: int) -> dict[str, Any]:
    """Gemma 3's attention window per layer: ``layer_types`` when given, else transformers'
    Gemma3TextConfig rule (sliding unless (i + 1) % sliding_window_pattern == 0)."""
    window = r.maybe_integer("sliding_window", default=None)
    types = r.cfg.get("layer_types")
    if types is not None:
        if (
            not isinstance(types, list)
            or len(types) != layers
            or any(t not in ("sliding_attention", "full_attention") for t in types)
        ):
            raise r.fail(
                f"{r.prefix}layer_types must list 'sliding_attention' or 'full_attention' for each of "
                f"{layers} layers",
                "layer_types",
            )
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    else:
        pattern = r.integer("sliding_window_pattern", maximum=MAX_LAYERS)
        sliding = tuple(i for i in range(layers) if (i + 1) % pattern)
    if window is None:
        sliding = ()
    return {"sliding_window": window, "sliding_layers": sliding}


def _vision(top: _Reader) -> VisionTower:
    """The SigLIP encoder of a multimodal checkpoint (``vision_config``)."""
    from ._arch import SIGLIP_VISION_DEFAULTS

    v = top.section("vision_config", SIGLIP_VISION_DEFAULTS)
    if v.boolean("vision_use_head", True):
        raise v.fail(
            "vision_config.vision_use_head: true (a SigLIP pooling head) is not supported; Gemma 3 sets false",
            "vision_config.vision_use_head",
        )
    tower = VisionTower(
        hidden_size=v.integer("hidden_size"),
        intermediate_size=v.integer("intermediate_size"),
        num_hidden_layers=v.integer("num_hidden_layers", maximum=MAX_LAYERS),
        num_attention_heads=v.integer("num_attention_heads"),
        num_channels=v.integer("num_channels"),
        image_size=v.integer("image_size"),
        patch_size=v.integer("patch_size"),
    )
    if tower.hidden_size % tower.num_attention_heads or tower.image_size % tower.patch_size:
        raise v.fail(
            "vision_config: hidden_size must be a multiple of num_attention_heads and image_size of patch_size",
            "vision_config",
        )
    return tower


def _quant_method(r: _Reader, qc: object) -> str | None:
    """``quantization_config.quant_method`` of a pre-quantized checkpoint (DeepSeek-V3 ships FP8: "fp8")."""
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise r.fail(f"quantization_config must be an object, got {type_name(qc)}", "quantization_config")
    method = qc.get("quant_method")
    if method is None:
        return "unknown"
    if not isinstance(method, str) or not method or len(method) > 64:
        raise r.fail(
            f"quantization_config.quant_method must be a short string, got {_show(method)}",
            "quantization_config",
        )
    return method


def _check_expert_budget(r: _Reader, layers: int, experts: int) -> None:
    if layers * experts > MAX_EXPERT_MODULES:
        raise r.fail(
            f"{layers} layers x {experts} experts is implausibly large (limit {MAX_EXPERT_MODULES} expert blocks)",
            "num_experts",
        )


__all__ = [
    "ARCHITECTURES",
    "SUPPORTED_ARCHITECTURES",
    "facts_from_dict",
    "resolve_architecture",
    "type_name",
]
