"""mbridge_compat, trainer side: mbridge 0.15.1 builds models on megatron-core 0.16 and later.

mbridge 0.15.1 (the newest on PyPI, verl's ``vanilla_mbridge`` path) compares the model type with
``ModelType.encoder_and_decoder`` while it builds the model (``mbridge/core/util.py`` lines 52 and 83, in
``get_model``), but megatron-core removed that member: from 0.16 its ``ModelType`` has ``encoder_or_decoder`` only
(``megatron/core/enums.py`` lines 6-9 in 0.18.2). Every Megatron run through mbridge then stops at the actor's
``init_model`` with ``AttributeError: type object 'ModelType' has no attribute 'encoder_and_decoder'`` (seen on the
H200, 2026-12-01, docs/results.md#rl-runs). Both comparisons only select the encoder-decoder branch, which a
decoder-only GPT never takes, so mbridge's module gets a ``ModelType`` whose ``encoder_and_decoder`` equals no
model type. Nothing else changes; with a megatron-core that still has the member the patch does nothing.
"""

from __future__ import annotations

import logging
from types import ModuleType, SimpleNamespace

from fp8spec.runtime.targets import MOD_MBRIDGE_UTIL  # noqa: F401  (the installer's target)

logger = logging.getLogger(__name__)


class _NoSuchModelType:
    """Equal to nothing but itself: the encoder-decoder branch is never taken."""

    def __repr__(self) -> str:
        return "<no encoder_and_decoder model type in this megatron-core>"


def patch_mbridge_util(module: ModuleType) -> bool:
    """Give ``mbridge.core.util`` a ``ModelType`` with ``encoder_and_decoder``; False when nothing was needed."""
    real = module.ModelType
    if hasattr(real, "encoder_and_decoder"):
        return False
    members = {m.name: m for m in real}
    setattr(module, "ModelType", SimpleNamespace(**members, encoder_and_decoder=_NoSuchModelType()))  # noqa: B010
    logger.info(
        "fp8spec mbridge_compat: megatron-core's ModelType has %s; mbridge.core.util sees encoder_and_decoder as "
        "a type no model has",
        sorted(members),
    )
    return True
