"""config.json (as a dict or a file) -> :class:`ModelFacts`. One code path for catalog entries and user files.

Never touches the network: only the given local file is read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fp8spec.bounded_read import ReadError, read_regular

from ._types import ConfigError, ModelFacts

#: largest config.json accepted (real ones are a few KiB)
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: plausibility bounds; they keep module listings finite and arithmetic meaningful
MAX_DIM = 2**31 - 1
MAX_LAYERS = 4096
MAX_EXPERTS = 65536
# layers x experts: Kimi K2 (61 x 384 = 23,424) and DeepSeek-V3 (61 x 256) with room. It bounds what
# validation walks once per model (benchmarks/bench_validate_bounds.py, BENCHMARKS.md: the worst config
# inside these bounds validates within the 2 s / 500 MB target)
MAX_EXPERT_MODULES = 32_768


@dataclass(frozen=True)
class Arch:
    name: str
    model_types: tuple[str, ...]
    family: str  # "gqa" | "mla"
    moe: bool = False  # Qwen3-MoE style routed experts (num_experts / mlp_only_layers / decoder_sparse_step)
    qk_norm: bool = False  # Qwen3: self_attn.q_norm / k_norm
    qkv_bias: str | bool = "attention_bias"  # True/False, or read from config key attention_bias
    o_bias: str | bool = "attention_bias"


ARCHITECTURES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("LlamaForCausalLM", ("llama",), "gqa"),
        Arch("MistralForCausalLM", ("mistral",), "gqa", qkv_bias=False, o_bias=False),
        Arch("Qwen2ForCausalLM", ("qwen2",), "gqa", qkv_bias=True, o_bias=False),
        Arch("Qwen3ForCausalLM", ("qwen3",), "gqa", qk_norm=True),
        Arch("Qwen3MoeForCausalLM", ("qwen3_moe",), "gqa", moe=True, qk_norm=True),
        Arch("DeepseekV2ForCausalLM", ("deepseek_v2",), "mla"),
        Arch("DeepseekV3ForCausalLM", ("deepseek_v3",), "mla"),
    )
}

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(sorted(ARCHITECTURES))
_BY_MODEL_TYPE = {mt: a for a in ARCHITECTURES.values() for mt in a.model_types}

_MISSING = object()


def _supported_sentence() -> str:
    return "supported architectures: " + ", ".join(SUPPORTED_ARCHITECTURES)


def _type_name(v: object) -> str:
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
    text = json.dumps(v) if isinstance(v, (str, int, float, bool, type(None))) else _type_name(v)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """Typed access to config keys, with errors that name the file, the key and what was expected."""

    def __init__(self, cfg: dict, where: str, arch: str, path: str | None):
        self.cfg, self.where, self.arch, self.path = cfg, where, arch, path

    def fail(self, msg: str, key: str | None = None) -> ConfigError:
        return ConfigError(f"{self.where}: {msg}", path=self.path, key=key)

    def _lookup(self, keys: tuple[str, ...]) -> tuple[str, object]:
        for k in keys:
            if k in self.cfg:
                return k, self.cfg[k]
        return keys[0], _MISSING

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
                alt = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
                raise self.fail(f"missing required key {key!r}{alt} for {self.arch}", key)
            return default  # type: ignore[return-value]
        if v is None and nullable:
            return None
        if v is None:
            raise self.fail(f"{key!r} must be an integer, got null", key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{key!r} must be an integer, got {_show(v)} ({_type_name(v)})", key)
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
        v = self.cfg.get(key, None)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(f"{key!r} must be true or false, got {_show(v)}", key)
        return v

    def int_list(self, key: str, *, upper: int) -> list[int]:
        v = self.cfg.get(key, None)
        if v is None:
            return []
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise self.fail(f"{key!r} must be a list of layer indices, got {_show(v)}", key)
        bad = [x for x in v if not 0 <= x < upper]
        if bad:
            raise self.fail(f"{key!r} contains {bad[0]}, outside layers 0..{upper - 1}", key)
        return v


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
    if model_type not in _BY_MODEL_TYPE:
        raise ConfigError(
            f"{where}: unsupported model_type {model_type!r}; {_supported_sentence()} "
            f"(model_type {', '.join(sorted(_BY_MODEL_TYPE))})",
            path=path,
            key="model_type",
        )
    return _BY_MODEL_TYPE[model_type]


def facts_from_dict(
    cfg: object, *, model_id: str, source: str, where: str, path: str | None = None
) -> ModelFacts:
    """Build :class:`ModelFacts` from a parsed config.json mapping."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: a config.json must be a JSON object, got {_type_name(cfg)}", path=path)
    arch = resolve_architecture(cfg, where, path)
    r = _Reader(cfg, where, arch.name, path)

    hidden = r.integer("hidden_size")
    layers = r.integer("num_hidden_layers", maximum=MAX_LAYERS)
    heads = r.integer("num_attention_heads")
    kv_heads = r.integer("num_key_value_heads", default=heads)
    vocab = r.integer("vocab_size")
    intermediate = r.integer("intermediate_size")
    tied = r.boolean("tie_word_embeddings", False)
    max_pos = r.maybe_integer("max_position_embeddings", default=None)
    quantization = _quant_method(r, cfg.get("quantization_config"))
    attention_bias = r.boolean("attention_bias", False)
    qkv_bias = attention_bias if arch.qkv_bias == "attention_bias" else bool(arch.qkv_bias)
    o_bias = attention_bias if arch.o_bias == "attention_bias" else bool(arch.o_bias)

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
        "qk_norm": arch.qk_norm,
        "max_position_embeddings": max_pos,
        "quantization": quantization,
        "source": source,
    }

    if arch.family == "gqa":
        head_dim = r.maybe_integer("head_dim", default=None)
        if head_dim is None:
            if hidden % heads:
                raise r.fail(
                    f"no 'head_dim' and hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})",
                    "head_dim",
                )
            head_dim = hidden // heads
        moe: dict[str, Any] = {
            "moe_intermediate_size": None,
            "shared_expert_intermediate_size": None,
            "num_experts": 0,
            "num_experts_per_tok": 0,
            "first_k_dense_layers": 0,
            "moe_layers": (),
        }
        if arch.moe:
            experts = r.integer("num_experts", "num_local_experts", minimum=0, maximum=MAX_EXPERTS)
            if experts:
                moe_inter = r.integer("moe_intermediate_size")
                top_k = r.integer("num_experts_per_tok", maximum=experts)
                step = r.integer("decoder_sparse_step", default=1, maximum=MAX_LAYERS)
                mlp_only = set(r.int_list("mlp_only_layers", upper=layers))
                # transformers Qwen3MoeDecoderLayer: MoE iff not in mlp_only_layers and (i + 1) % step == 0
                gqa_moe_layers = tuple(i for i in range(layers) if i not in mlp_only and (i + 1) % step == 0)
                _check_expert_budget(r, layers, experts)
                if gqa_moe_layers:
                    moe = {
                        "moe_intermediate_size": moe_inter,
                        "shared_expert_intermediate_size": None,
                        "num_experts": experts,
                        "num_experts_per_tok": top_k,
                        "first_k_dense_layers": gqa_moe_layers[0],
                        "moe_layers": gqa_moe_layers,
                    }
        return ModelFacts(attention="gqa", head_dim=head_dim, **common, **moe)

    # MLA: DeepSeek-V2 / V3
    q_lora = r.maybe_integer("q_lora_rank", nullable=True)
    kv_lora = r.integer("kv_lora_rank")
    nope = r.integer("qk_nope_head_dim")
    rope = r.integer("qk_rope_head_dim")
    v_dim = r.integer("v_head_dim")
    experts = (
        r.maybe_integer(
            "n_routed_experts", "num_local_experts", minimum=0, maximum=MAX_EXPERTS, nullable=True
        )
        or 0
    )
    first_k = r.integer("first_k_dense_replace", minimum=0, maximum=MAX_LAYERS)
    freq = r.integer("moe_layer_freq", default=1, maximum=MAX_LAYERS)
    mtp = r.integer("num_nextn_predict_layers", "num_mtp_layers", default=0, minimum=0, maximum=MAX_LAYERS)
    moe_layers: tuple[int, ...] = ()
    moe_inter = top_k = 0  # read only for a MoE model
    n_shared = 0
    if experts:
        moe_inter = r.integer("moe_intermediate_size")
        top_k = r.integer("num_experts_per_tok", maximum=experts)
        n_shared = r.maybe_integer("n_shared_experts", minimum=0, maximum=MAX_EXPERTS, nullable=True) or 0
        # modeling_deepseek / vLLM: MoE iff layer >= first_k_dense_replace and layer % moe_layer_freq == 0
        moe_layers = tuple(i for i in range(layers) if i >= first_k and i % freq == 0)
        _check_expert_budget(r, layers + mtp, experts)
    is_moe = bool(moe_layers)
    return ModelFacts(
        attention="mla",
        head_dim=nope + rope,
        q_lora_rank=q_lora,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=v_dim,
        moe_intermediate_size=moe_inter if is_moe else None,
        shared_expert_intermediate_size=(moe_inter * n_shared) if is_moe and n_shared else None,
        num_shared_experts=n_shared if is_moe else 0,
        num_experts=experts if is_moe else 0,
        num_experts_per_tok=top_k if is_moe else 0,
        first_k_dense_layers=moe_layers[0] if is_moe else 0,
        moe_layers=moe_layers,
        num_mtp_layers=mtp,
        **common,
    )


def _quant_method(r: _Reader, qc: object) -> str | None:
    """``quantization_config.quant_method`` of a pre-quantized checkpoint (DeepSeek-V3 ships FP8: "fp8")."""
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise r.fail(f"quantization_config must be an object, got {_type_name(qc)}", "quantization_config")
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


# --- files --------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def read_config_file(path: str | os.PathLike[str]) -> tuple[dict, Path]:
    """Read and parse a local config.json. A directory is accepted when it holds a ``config.json``."""
    try:
        p = Path(os.fspath(path)).expanduser()
    except TypeError:
        raise ConfigError(f"config path must be a file path, got {_type_name(path)}") from None
    shown = str(p)
    try:
        if p.is_dir():
            inner = p / "config.json"
            if not inner.is_file():
                raise ConfigError(
                    f"{shown}: is a directory, not a config.json (and it holds no config.json)", path=shown
                )
            p, shown = inner, str(inner)
        data = read_regular(p, MAX_CONFIG_BYTES, "config.json")
    except ReadError as e:
        why = str(e)
        if "not found" in why:
            why = "no such file"
        elif "larger than the limit" in why:
            why = f"too large for a config.json (limit {MAX_CONFIG_BYTES} bytes)"
        raise ConfigError(f"{shown}: {why}", path=shown) from None
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read: {e.strerror or e}", path=shown) from None
    except ValueError as e:  # e.g. embedded NUL in the path
        raise ConfigError(f"{shown}: invalid path: {e}", path=shown) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{shown}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", path=shown
        ) from None
    if not text.strip():
        raise ConfigError(f"{shown}: empty file, expected a JSON object", path=shown)
    try:
        cfg = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{shown}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}", path=shown) from None
    except RecursionError:
        raise ConfigError(f"{shown}: invalid JSON: nested too deeply", path=shown) from None
    except ValueError as e:  # duplicate keys, NaN/Infinity, integers with too many digits
        raise ConfigError(f"{shown}: invalid JSON: {e}", path=shown) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{shown}: a config.json must be a JSON object, got {_type_name(cfg)}", path=shown)
    return cfg, p


def model_from_config(path: str | os.PathLike[str], model_id: str | None = None) -> ModelFacts:
    """Build :class:`ModelFacts` from a local Hugging Face ``config.json`` (or a directory holding one).

    ``model_id`` names the result; by default the config's ``_name_or_path``, else the file path.
    Raises :class:`ConfigError` for anything that is not a readable config of a supported architecture.
    """
    cfg, p = read_config_file(path)
    name = model_id
    if not name:
        nop = cfg.get("_name_or_path")
        name = nop if isinstance(nop, str) and nop.strip() else str(p)
    return facts_from_dict(cfg, model_id=name, source=f"config.json: {p}", where=str(p), path=str(p))


__all__ = [
    "ARCHITECTURES",
    "SUPPORTED_ARCHITECTURES",
    "facts_from_dict",
    "model_from_config",
    "read_config_file",
    "resolve_architecture",
]
