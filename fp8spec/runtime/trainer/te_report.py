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

One log line per call: ``fp8spec te_report: update: fwd FP8 14/14 TE modules ... bwd FP8 14 ... BF16: router x4
...``. Installed with ``kv_hooks`` by ``verl_patch.patch_engine_workers``; imports nothing from TE itself.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from typing import Any

import torch

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


class TEReport:
    """Per-call record of FP8 use in a Megatron model's TE modules and of the modules kept in BF16."""

    def __init__(self) -> None:
        self.te_modules = 0
        self.bf16_modules: Counter = Counter()
        self._handles: list = []
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

    def attach(self, chunks: Any) -> int:
        """Hook every module of the model chunk(s); returns the number of TE modules found."""
        for chunk in chunks if isinstance(chunks, (list, tuple)) else [chunks]:
            for name, module in chunk.named_modules():
                if _is_te_module(module):
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
        if not getattr(module, "fp8", False):
            self.fwd_bf16[cls] += 1
            return
        self.fwd_fp8[cls] += 1
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
