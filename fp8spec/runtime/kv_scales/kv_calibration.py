"""Per-step FP8 KV-cache scale calibration on the trainer.

The paper recalibrated q/k/v scales every step by re-arming vLLM's ``calculate_kv_scales``; vLLM
0.33 removed it (vLLM PR #49389) and verl 0.9.1 never re-arms it. Here the trainer computes the scales
from the post-RoPE query/key/value tensors of a forward pass it already runs and ships them with
the weight update.

Where the tensors are taken:

* Hugging Face models (transformers >= 4.48, read in 5.24 ``models/qwen3/modeling_qwen3.py``
  ``Qwen3Attention.forward``): q/k pass through ``apply_rotary_pos_emb`` and then go to
  ``attention_interface(self, query_states, key_states, value_states, ...)``, looked up per call in
  ``ALL_ATTENTION_FUNCTIONS`` (``modeling_utils.AttentionInterface``). We register a wrapper for the
  model's ``config._attn_implementation`` with ``AttentionInterface.register``; it sees the
  post-RoPE tensors with their module (``module.layer_idx``) and passes everything through.
  Modules without a calibrator attached cost one attribute lookup.
* Megatron-Core: ``Attention.forward`` (``megatron/core/transformer/attention.py``) applies RoPE and
  then calls ``self.core_attention(query, key, value, attention_mask, ...)``; a forward pre-hook on
  every ``*.self_attention.core_attention`` module (``DotProductAttention`` or TE's
  ``TEDotProductAttention``) reads q/k/v from the call. The layer index is ``layer_number - 1``
  (Megatron's 1-based global layer number, pipeline offset included).

Scales: ``scale = amax / divisor`` per tensor kind, in float32. The default divisors (q 200,
k 200, v 100) are vLLM's ``Q/K/V_SCALE_CONSTANT`` used by its own ``calc_kv_scales``
(vLLM 0.24.0 ``vllm/envs.py`` lines 143-145, ``model_executor/layers/attention/attention.py``
lines 547-549), i.e. what the paper's per-step recalibration produced; ``divisors="fp8_max"``
gives the tightest scales (amax/448).

Names: ``model.layers.{i}.self_attn.attn.{q,k,v}_scale`` — the attention layer prefix in vLLM
(``vllm/model_executor/models/qwen3.py``: ``prefix=f"{prefix}.attn"``, 0.24.0 line 139, 0.33.0
line 149) and SGLang (``sglang/srt/models/qwen3.py``: ``prefix=add_prefix("attn", prefix)``,
0.5.12 line 150), under the Qwen/Llama ``model.layers.{i}.self_attn`` layout.

Cost: per attention call three max-|x| reductions and one 3-element maximum, all on device, no
host sync. Reductions across data/tensor/pipeline-parallel ranks happen once per weight sync
(``reduce``), as one all-reduce(MAX) of a [num_layers, 3] tensor.

Piggyback vs fresh pass: by default the calibrator is armed during the old-log-prob forward (and
the actor update forwards) the trainer already runs; the scales pushed with the next weight sync
then come from the weights of the step being trained (up to one optimizer step stale) but cost no
extra forward. A fresh pass after the update (``calibrate_with``) sees the exact weights being
pushed but costs one forward over a calibration batch. docs/results.md#kv-scales has the measured costs.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from fp8spec.runtime.envs import FP8_MAX_DIVISORS, VLLM_CALC_DIVISORS

NAME_TEMPLATE = "model.layers.{layer}.self_attn.attn.{kind}_scale"
KINDS = ("q", "k", "v")
_SCALE_NAME_RE = re.compile(r"^(?P<prefix>.*?)\.(?P<kind>[qkv])_scale$")

_ATTR = "_fp8spec_kv_calibrator"
_LAYER_ATTR = "_fp8spec_kv_layer"


def is_kv_scale_name(name: str) -> bool:
    """True for ``….self_attn.attn.{q,k,v}_scale`` names (the ones this module produces)."""
    return name.endswith(("attn.q_scale", "attn.k_scale", "attn.v_scale"))


def split_kv_scale_name(name: str) -> tuple[str, str]:
    """``model.layers.3.self_attn.attn.k_scale`` -> (``model.layers.3.self_attn.attn``, ``k``)."""
    m = _SCALE_NAME_RE.match(name)
    if not m:
        raise ValueError(f"not a kv scale name: {name}")
    return m.group("prefix"), m.group("kind")


def pushed_scales(
    named_scales: Iterable[tuple[str, torch.Tensor | float]], factor: float, skip: tuple[str, ...] = ()
) -> Iterator[tuple[str, str, float]]:
    """(attention module path, "q" | "k" | "v", scale x ``factor``) of each pushed scale the engine takes (kinds in
    ``skip`` are passed over); a scale that is not positive is refused. What the engine writers share
    (engines/vllm_kv.py, engines/sglang_kv.py)."""
    for name, value in named_scales:
        prefix, kind = split_kv_scale_name(name)
        if kind in skip:
            continue
        v = float(value.item() if isinstance(value, torch.Tensor) else value) * factor
        if not v > 0.0:
            raise ValueError(f"{name}: scale must be positive, got {v}")
        yield prefix, kind, v


def scales_per_layer(
    model: torch.nn.Module,
    named_scales: Iterable[tuple[str, torch.Tensor | float]],
    factor: float,
    layer: str,
    marker: str,
    skip: tuple[str, ...] = (),
) -> list[tuple[str, torch.nn.Module, dict[str, float]]]:
    """(path, attention module, {kind: scale}) per layer the pushed scales name, every module found before any is
    written: a name with no module, or with a module that is not the engine's attention ``layer`` (it lacks
    ``marker``), raises KeyError (a silent miss would leave the engine on stale scales). What the engine writers
    share (engines/vllm_kv.py, engines/sglang_kv.py)."""
    per_layer: dict[str, dict[str, float]] = {}
    for prefix, kind, v in pushed_scales(named_scales, factor, skip):
        per_layer.setdefault(prefix, {})[kind] = v
    out = []
    for prefix, kinds in per_layer.items():
        try:
            module = model.get_submodule(prefix)
        except AttributeError as e:
            raise KeyError(f"no attention module {prefix!r} in the model") from e
        if not hasattr(module, marker):
            raise KeyError(f"{prefix!r} is not a {layer} layer (no {marker})")
        out.append((prefix, module, kinds))
    return out


def _amax(t: torch.Tensor) -> torch.Tensor:
    # max |x| in one reduction kernel, no |x| temporary; exact (max is exact in any dtype)
    return torch.linalg.vector_norm(t.detach(), float("inf")).to(torch.float32)


class KVScaleCalibrator:
    """Running per-layer max|q|, max|k|, max|v| while armed; scales and names for the engine."""

    def __init__(self, num_layers: int, divisors=VLLM_CALC_DIVISORS, name_template: str = NAME_TEMPLATE):
        if divisors == "fp8_max":
            divisors = FP8_MAX_DIVISORS
        elif divisors == "vllm":
            divisors = VLLM_CALC_DIVISORS
        if len(divisors) != 3 or min(divisors) <= 0:
            raise ValueError(f"divisors must be three positive numbers (q, k, v), got {divisors}")
        self.num_layers = int(num_layers)
        self.divisors = tuple(float(d) for d in divisors)
        self.name_template = name_template
        self.armed = False
        self.amax: torch.Tensor | None = None  # [num_layers, 3] float32, allocated on first observe
        self.observed_calls = 0
        self._handles: list = []
        self._modules: list = []

    # ---------------------------------------------------------------- observe
    def observe(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} out of range for {self.num_layers} layers")
        with torch.no_grad():
            cur = torch.stack([_amax(q), _amax(k), _amax(v)])
            if self.amax is None or self.amax.device != cur.device:
                self.amax = torch.zeros((self.num_layers, 3), dtype=torch.float32, device=cur.device)
            row = self.amax[layer]
            torch.maximum(row, cur, out=row)
        self.observed_calls += 1

    @contextlib.contextmanager
    def calibrating(self) -> Iterator[KVScaleCalibrator]:
        """Arm the hooks for the duration of the block (re-entrant)."""
        prev, self.armed = self.armed, True
        try:
            yield self
        finally:
            self.armed = prev

    def reset(self) -> None:
        if self.amax is not None:
            self.amax.zero_()
        self.observed_calls = 0

    def has_data(self) -> bool:
        return self.amax is not None

    # ---------------------------------------------------------------- results
    def reduce(self, group: Any = None, device: torch.device | str | None = None) -> None:
        """all-reduce(MAX) the running amax over ``group`` (all ranks must call it, observed or not)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        if self.amax is None:
            dev = device or (
                torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
            )
            self.amax = torch.zeros((self.num_layers, 3), dtype=torch.float32, device=dev)
        dist.all_reduce(self.amax, op=dist.ReduceOp.MAX, group=group)

    def scales(self) -> torch.Tensor:
        """[num_layers, 3] float32 scales (amax / divisor); zero rows were never observed."""
        if self.amax is None:
            return torch.zeros((self.num_layers, 3), dtype=torch.float32)
        div = torch.tensor(self.divisors, dtype=torch.float32, device=self.amax.device)
        return self.amax / div

    def named_scales(self, device: torch.device | str | None = None) -> list[tuple[str, torch.Tensor]]:
        """``[(name, 0-d float32 tensor), …]`` for every observed layer, q/k/v order, layer order."""
        s = self.scales()
        if device is not None:
            s = s.to(device)
        seen = (self.amax > 0).all(dim=1).tolist() if self.amax is not None else [False] * self.num_layers
        out = []
        for layer in range(self.num_layers):
            if not seen[layer]:
                continue
            for j, kind in enumerate(KINDS):
                out.append((self.name_template.format(layer=layer, kind=kind), s[layer, j].clone()))
        return out

    # ---------------------------------------------------------------- attach / detach
    def attach(
        self, model_or_modules: torch.nn.Module | list[torch.nn.Module] | tuple[torch.nn.Module, ...]
    ) -> int:
        """Attach to a HF model or Megatron model chunk(s); returns the number of attention layers hooked."""
        mods = list(model_or_modules) if isinstance(model_or_modules, (list, tuple)) else [model_or_modules]
        n = 0
        for m in mods:
            n += self.attach_hf(m) + self.attach_megatron(m)
        return n

    def attach_hf(self, model: torch.nn.Module) -> int:
        impls, n = set(), 0
        for _, mod in model.named_modules():
            if _is_hf_attention(mod):
                setattr(mod, _ATTR, self)
                setattr(mod, _LAYER_ATTR, int(mod.layer_idx))
                impls.add(getattr(mod.config, "_attn_implementation", None) or "eager")
                self._modules.append(mod)
                n += 1
        for impl in impls:
            install_hf_attention_wrapper(impl)
        return n

    def attach_megatron(self, model: torch.nn.Module, layer_offset: int = 0) -> int:
        n = 0
        for name, mod in model.named_modules():
            if not name.endswith("self_attention.core_attention"):
                continue
            ln = getattr(mod, "layer_number", None)
            if ln is not None:
                layer = int(ln) - 1
            else:  # fall back on the local index in the module name
                m = re.search(r"layers\.(\d+)\.self_attention\.core_attention$", name)
                if not m:
                    continue
                layer = int(m.group(1)) + layer_offset
            setattr(mod, _ATTR, self)
            setattr(mod, _LAYER_ATTR, layer)
            self._handles.append(mod.register_forward_pre_hook(_megatron_pre_hook, with_kwargs=True))
            self._modules.append(mod)
            n += 1
        return n

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        for mod in self._modules:
            for a in (_ATTR, _LAYER_ATTR):
                if hasattr(mod, a):
                    delattr(mod, a)
        self._handles.clear()
        self._modules.clear()

    # ---------------------------------------------------------------- fresh pass
    def calibrate_with(self, model: torch.nn.Module, batches: Iterable, **forward_kwargs: Any) -> None:
        """A fresh calibration pass: reset, run ``model(**batch)`` (or ``model(batch)``) under no_grad."""
        self.reset()
        with torch.no_grad(), self.calibrating():
            for b in batches:
                if isinstance(b, dict):
                    model(**b, **forward_kwargs)
                else:
                    model(b, **forward_kwargs)


def _is_hf_attention(mod) -> bool:
    return (
        hasattr(mod, "layer_idx")
        and hasattr(mod, "config")
        and type(mod).__name__.endswith("Attention")
        and any(hasattr(mod, p) for p in ("q_proj", "qkv_proj", "c_attn", "query_key_value"))
    )


def num_layers_of(model: torch.nn.Module | list[torch.nn.Module] | tuple[torch.nn.Module, ...]) -> int | None:
    """Number of decoder layers from a HF model config or a Megatron TransformerConfig."""
    models = model if isinstance(model, (list, tuple)) else [model]
    for m in models:
        cfg = getattr(m, "config", None)
        for attr in ("num_hidden_layers", "num_layers"):
            v = getattr(cfg, attr, None)
            if isinstance(v, int):
                return v
        for sub in m.modules():
            cfg = getattr(sub, "config", None)
            for attr in ("num_hidden_layers", "num_layers"):
                v = getattr(cfg, attr, None)
                if isinstance(v, int):
                    return v
    return None


# -------------------------------------------------------------------- HF attention interface
_HF_WRAPPED: dict[str, Any] = {}


def install_hf_attention_wrapper(impl: str) -> None:
    """Register a pass-through wrapper for attention implementation ``impl`` (idempotent)."""
    if impl in _HF_WRAPPED:
        return
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    orig = ALL_ATTENTION_FUNCTIONS.get(impl) if impl in ALL_ATTENTION_FUNCTIONS else None

    def fp8spec_kv_calibration_attention(module, query, key, value, *args, **kwargs):
        cal = getattr(module, _ATTR, None)
        if cal is not None and cal.armed:
            cal.observe(getattr(module, _LAYER_ATTR), query, key, value)
        fn = orig
        if fn is None:  # "eager": the model file's own eager_attention_forward
            fn = sys.modules[type(module).__module__].eager_attention_forward
        return fn(module, query, key, value, *args, **kwargs)

    fp8spec_kv_calibration_attention.__wrapped__ = orig  # type: ignore[attr-defined]
    AttentionInterface.register(impl, fp8spec_kv_calibration_attention)
    _HF_WRAPPED[impl] = orig


def uninstall_hf_attention_wrappers() -> None:
    from transformers.modeling_utils import AttentionInterface

    for impl, orig in list(_HF_WRAPPED.items()):
        if orig is None:
            AttentionInterface._global_mapping.pop(impl, None)
        else:
            AttentionInterface.register(impl, orig)
        del _HF_WRAPPED[impl]


def _megatron_pre_hook(module, args, kwargs):
    cal = getattr(module, _ATTR, None)
    if cal is None or not cal.armed:
        return None
    names = ("query", "key", "value")
    qkv = [args[i] if len(args) > i else kwargs[names[i]] for i in range(3)]
    cal.observe(getattr(module, _LAYER_ATTR), *qkv)
    return None
