"""te_extra_state_compat, trainer side: checkpoints of FP8-trained MoE experts with TE's stateless recipes.

TransformerEngine 2.20 saves no extra state for the recipes that keep no scaling history (blockwise, current
scaling, MXFP8: ``transformer_engine/pytorch/_extra_state.py`` lines 47-53, ``module/base.py`` lines 1391-1393
return an empty tensor). megatron-core 0.18.2's ``TEGroupedLinear._split_extra_state``
(``megatron/core/extensions/transformer_engine.py`` lines 2267-2276) decodes that empty tensor to ``None`` and then
indexes it, so saving a checkpoint of a Megatron MoE trained in FP8 with those recipes fails with
``TypeError: 'NoneType' object is not subscriptable`` (the H200 run of 2026-12-01 stopped there at its first
save, docs/results.md#rl-runs). megatron-core 0.19.2 returns one empty state per GEMM in that case (lines
2471-2473); this patch gives 0.18.2 the same answer and leaves every other case to megatron-core's own code.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

import torch

from fp8spec.runtime.targets import MOD_MEGATRON_TE  # noqa: F401  (the installer's target)

logger = logging.getLogger(__name__)


def split_extra_state_with_stateless_recipes(orig: Any) -> Any:
    """Wrap ``TEGroupedLinear._split_extra_state``: an empty (stateless) FP8 extra state splits into empties."""

    @functools.wraps(orig)
    def _split_extra_state(self, state):
        fp8_checkpoint = self.fp8_meta["fp8_checkpoint"] or self.fp8 or self.fp8_calibration
        if fp8_checkpoint and self._decode_extra_state(state) is None:
            return [torch.empty(0, dtype=torch.uint8)] * self.num_gemms
        return orig(self, state)

    _split_extra_state._fp8spec_patched = True  # type: ignore[attr-defined]
    return _split_extra_state


def patch_megatron_te(module: ModuleType) -> bool:
    """Install the wrapper on ``TEGroupedLinear`` (absent without TE); False when there was nothing to patch."""
    cls = getattr(module, "TEGroupedLinear", None)
    if cls is None or getattr(cls._split_extra_state, "_fp8spec_patched", False):
        return False
    cls._split_extra_state = split_extra_state_with_stateless_recipes(cls._split_extra_state)
    logger.info("fp8spec te_extra_state_compat: TEGroupedLinear splits TE's empty (stateless) extra state")
    return True
