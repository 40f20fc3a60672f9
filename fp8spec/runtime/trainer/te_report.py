"""te_report, trainer side: what ran in FP8 in the Megatron actor's forward and backward, read off the modules.

End-to-end FP8 training is configured by ``override_transformer_config.fp8`` / ``fp8_recipe``, but a config says
what was asked, not what ran. This report looks at the TransformerEngine modules themselves after each call of the
actor's ``infer_batch`` (old log-prob) and ``train_mini_batch`` (update) (TE 2.20, ``pytorch/module/base.py``):

* a forward hook on every TE module (``TransformerEngineBaseModule`` in its MRO) records ``module.fp8``, which TE
  sets in ``prepare_forward`` from the FP8 autocast state, the recipe in ``module.fp8_meta["recipe"]`` and the
  forward quantizers ``module.quantizers["scaling_fwd"]`` (their FP8 dtype and 1D/2D block scaling);
* a hook on that module's output tensor fires when its gradient arrives, i.e. when the module's backward runs
  (TE's autograd functions keep the forward's ``fp8`` flag in ``ctx``) and records the backward quantizers
  ``module.quantizers["scaling_bwd"]`` (E5M2 gradients under the hybrid recipe);
* the modules the recipe keeps in BF16 are counted by kind from their class and name (router, embedding,
  output layer, norms) with the dtype of their weight, and whether FP8 autocast was active around them.

Each TE module also has a class (``module_precision.MODULE_GLOBS``: attention, dense_mlp, experts,
shared_experts; ``first_last`` for the layers megatron-core keeps in BF16 through ``first_last_layers_bf16``,
``fp8_utils.is_first_last_bf16_layer``), so the line shows per class how many forward calls ran FP8, next to the
classes the spec's layout planned in BF16: a run shows whether its layout took effect.

One log line per call: ``fp8spec te_report: update: fwd FP8 14/14 TE modules ... bwd FP8 14 ... by class
attention 8/8, experts 0/8; planned BF16 experts; BF16: router x4 ...``. Installed with ``kv_hooks`` by
``verl_patch.patch_engine_workers``; imports nothing from TE itself.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import Counter
from typing import Any, Optional

import torch

from fp8spec.runtime import envs
from fp8spec.runtime.trainer.module_precision import MODULE_GLOBS, module_class

logger = logging.getLogger(__name__)

_TE_BASE = "TransformerEngineBaseModule"
# TE's DType values of its FP8 formats (transformer_engine/transformer_engine.h: kNVTEFloat8E4M3 = 7,
# kNVTEFloat8E5M2 = 8); the quantizers' dtype prints as the bare number in TE 2.20.
_TE_FP8_DTYPES = {7: "E4M3", 8: "E5M2"}


def _is_te_module(module: torch.nn.Module) -> bool:
    return any(cls.__name__ == _TE_BASE for cls in type(module).__mro__)


def bf16_kind(name: str, module: torch.nn.Module) -> str | None:
    """The recipe's BF16 module kinds (router, embedding, output layer, norm), from class and module name.

    Only modules that own their weight count, so a wrapper (Megatron's LanguageModelEmbedding around its
    VocabParallelEmbedding) is not counted twice.
    """
    if "weight" not in getattr(module, "_parameters", {}):
        return None
    cls = type(module).__name__
    if "Router" in cls:
        return "router"
    if "Embedding" in cls:
        return "embedding"
    if name.endswith("output_layer"):
        return "output_layer"
    if "Norm" in cls and not _is_te_module(module):
        return "norm"
    return None


def _describe_quantizer(q: Any) -> str:
    raw = getattr(q, "dtype", "?")
    try:
        dtype = _TE_FP8_DTYPES.get(int(raw), str(raw))
    except (TypeError, ValueError):
        dtype = str(raw).rsplit(".", 1)[-1]
    dim = getattr(q, "block_scaling_dim", 0)
    block = {1: "1x128", 2: "128x128"}.get(dim if isinstance(dim, int) else 0, "")
    return f"{type(q).__name__}({dtype}{', ' + block if block else ''})"


FIRST_LAST = "first_last"
CORE_ATTENTION = "core_attention"
_LAYER = re.compile(r"(^|.*\.)layers\.\d+$")


def first_last_layers(config: Any) -> Optional[tuple[int, int, int]]:
    """(BF16 layers at the start, at the end, all layers) of a megatron-core config with first_last_layers_bf16,
    else None (fp8_utils.is_first_last_bf16_layer reads the same three fields)."""
    try:
        if not config.first_last_layers_bf16:
            return None
        return (
            int(config.num_layers_at_start_in_bf16),
            int(config.num_layers_at_end_in_bf16),
            int(config.num_layers),
        )
    except AttributeError:  # no megatron-core config (or one without the fields)
        return None


def _model_config(chunk: torch.nn.Module) -> Any:
    """The first megatron-core TransformerConfig a module of ``chunk`` holds (GPTModel's, under verl's wrappers)."""
    for _, module in chunk.named_modules():
        config = getattr(module, "config", None)
        if type(config).__name__.endswith("TransformerConfig"):
            return config
    return None


def te_classes(chunk: torch.nn.Module) -> dict[str, str]:
    """Module name -> class, for every module of ``chunk`` under a decoder layer (first_last where
    megatron-core keeps the whole layer in BF16, by the layer's global 0-based number)."""
    edges = first_last_layers(_model_config(chunk))
    layer_of: dict[str, int] = {}
    classes: dict[str, str] = {}
    for name, module in chunk.named_modules():
        number = getattr(module, "layer_number", None)
        if _LAYER.match(name) and isinstance(number, int):
            layer_of[name] = number - 1  # TransformerLayer.layer_number counts from 1, globally
            continue
        # TE's core attention takes no quant config (only its linears do), so the layout never moves it: a
        # class of its own, FP8 wherever the layer's autocast is
        cls = CORE_ATTENTION if name.rsplit(".", 1)[-1] == CORE_ATTENTION else module_class(name)
        if cls is None:
            continue
        prefix = next((p for p in layer_of if name.startswith(p + ".")), None)
        if edges is not None and prefix is not None:
            start, end, layers = edges
            if layer_of[prefix] < start or layer_of[prefix] >= layers - end:
                cls = FIRST_LAST
        classes[name] = cls
    return classes


def planned_bf16(config_edges: Optional[tuple[int, int, int]]) -> list[str]:
    """The classes the run was compiled to keep in BF16: the module_precision classes and first_last."""
    planned = [c for c in envs.BF16_MODULES.read() if c in MODULE_GLOBS]
    return planned + [FIRST_LAST] * (config_edges is not None)


class TEReport:
    """Per-call record of FP8 use in a Megatron model's TE modules and of the modules kept in BF16."""

    def __init__(self) -> None:
        self.te_modules = 0
        self.bf16_modules: Counter = Counter()
        self._handles: list = []
        self.classes: dict[int, str] = {}  # id(TE module) -> its class
        self.planned: list[str] = []
        self.reset()

    def reset(self) -> None:
        self.fwd_fp8: Counter = Counter()
        self.fwd_bf16: Counter = Counter()
        self.bwd_fp8: Counter = Counter()
        self.recipes: set[str] = set()
        self.fwd_quantizers: set[str] = set()
        self.bwd_quantizers: set[str] = set()
        self.bf16_seen: Counter = Counter()
        self.bf16_under_autocast: Counter = Counter()
        self.bf16_weight_dtypes: set[str] = set()
        self.class_fp8: Counter = Counter()
        self.class_calls: Counter = Counter()

    def attach(self, chunks: Any) -> int:
        """Hook every module of the model chunk(s); returns the number of TE modules found."""
        for chunk in chunks if isinstance(chunks, (list, tuple)) else [chunks]:
            classes = te_classes(chunk)
            edges = first_last_layers(_model_config(chunk))
            self.planned += [c for c in planned_bf16(edges) if c not in self.planned]
            for name, module in chunk.named_modules():
                if _is_te_module(module):
                    self.classes[id(module)] = classes.get(name, "other")
                    self.te_modules += 1
                    self._handles.append(module.register_forward_hook(self._te_forward))
                    continue
                kind = bf16_kind(name, module)
                if kind is not None:
                    self.bf16_modules[kind] += 1
                    self._handles.append(
                        module.register_forward_hook(functools.partial(self._bf16_forward, kind))
                    )
        return self.te_modules

    def _te_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        cls = type(module).__name__
        group = self.classes.get(id(module), "other")
        self.class_calls[group] += 1
        if not getattr(module, "fp8", False):
            self.fwd_bf16[cls] += 1
            return
        self.fwd_fp8[cls] += 1
        self.class_fp8[group] += 1
        recipe = getattr(module, "fp8_meta", {}).get("recipe")
        if recipe is not None:
            fmt = str(getattr(recipe, "fp8_format", "")).rsplit(".", 1)[-1]
            self.recipes.add(f"{type(recipe).__name__}({fmt})")
        quantizers = getattr(module, "quantizers", {}) or {}
        self.fwd_quantizers.update(_describe_quantizer(q) for q in quantizers.get("scaling_fwd", []) or [])
        out = output[0] if isinstance(output, (tuple, list)) else output
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(functools.partial(self._te_backward, module))

    def _te_backward(self, module: torch.nn.Module, grad: torch.Tensor) -> None:
        self.bwd_fp8[type(module).__name__] += 1
        quantizers = getattr(module, "quantizers", {}) or {}
        self.bwd_quantizers.update(_describe_quantizer(q) for q in quantizers.get("scaling_bwd", []) or [])

    def _bf16_forward(self, kind: str, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.bf16_seen[kind] += 1
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            self.bf16_weight_dtypes.add(f"{kind}:{str(weight.dtype).rsplit('.', 1)[-1]}")
        if _fp8_autocast_active():
            self.bf16_under_autocast[kind] += 1

    def line(self, phase: str) -> str:
        fwd_total = sum(self.fwd_fp8.values()) + sum(self.fwd_bf16.values())
        fp8 = ", ".join(f"{k} x{v}" for k, v in sorted(self.fwd_fp8.items())) or "none"
        parts = [
            f"{phase}: fwd FP8 {sum(self.fwd_fp8.values())}/{fwd_total} TE module calls ({fp8})",
            f"recipe {', '.join(sorted(self.recipes)) or 'none'}",
            f"fwd quantizers {', '.join(sorted(self.fwd_quantizers)) or 'none'}",
            f"bwd FP8 {sum(self.bwd_fp8.values())} calls, quantizers {', '.join(sorted(self.bwd_quantizers)) or 'none'}",
            "by class "
            + (
                ", ".join(f"{k} {self.class_fp8[k]}/{v}" for k, v in sorted(self.class_calls.items()))
                or "none"
            ),
            f"planned BF16 {', '.join(self.planned) or 'none'}",
            "BF16 kept: "
            + (
                ", ".join(
                    f"{k} x{self.bf16_seen[k]} (under FP8 autocast {self.bf16_under_autocast[k]})"
                    for k in sorted(self.bf16_seen)
                )
                or "none seen"
            ),
            f"weights {', '.join(sorted(self.bf16_weight_dtypes)) or '-'}",
        ]
        if self.fwd_bf16:
            parts.insert(
                1,
                "TE modules outside FP8: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.fwd_bf16.items())),
            )
        return "; ".join(parts)


def _fp8_autocast_active() -> bool:
    """TE's global FP8 autocast state, looked up without importing TE where it is not loaded."""
    import sys

    quant = sys.modules.get("transformer_engine.pytorch.quantization") or sys.modules.get(
        "transformer_engine.pytorch.fp8"
    )
    manager = getattr(quant, "FP8GlobalStateManager", None)
    return bool(manager is not None and manager.is_fp8_enabled())


def _wrap_reported(obj: Any, method: str, phase: str, report: TEReport) -> None:
    orig = getattr(obj, method)

    @functools.wraps(orig)
    def reported(*args, **kwargs):
        report.reset()
        try:
            return orig(*args, **kwargs)
        finally:
            logger.info("fp8spec te_report: %s", report.line(phase))

    setattr(obj, method, reported)


def attach_te_report(worker: Any) -> TEReport | None:
    """Attach a report to ``worker.actor`` (an ActorRolloutRefWorker after init_model) of a Megatron engine."""
    actor = getattr(worker, "actor", None)
    if actor is None or getattr(worker, "_fp8spec_te_report", None) is not None:
        return None
    report = TEReport()
    found = report.attach(actor.engine.module)
    if found == 0:
        logger.warning(
            "fp8spec te_report: the actor has no TransformerEngine module (not a Megatron TE model)"
        )
    _wrap_reported(actor, "infer_batch", "old_log_prob", report)
    _wrap_reported(actor, "train_mini_batch", "update", report)
    worker._fp8spec_te_report = report
    logger.info(
        "fp8spec te_report: watching %d TE modules; BF16 kinds %s",
        found,
        dict(sorted(report.bf16_modules.items())),
    )
    return report
