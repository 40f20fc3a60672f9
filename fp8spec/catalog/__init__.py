"""Model catalog: the architecture facts an FP8 check needs, and the checkpoint's real module names.

    from fp8spec.catalog import get_model, catalog_ids, model_from_config
    facts = get_model("Qwen/Qwen3-30B-A3B-Base")     # embedded entry (exact id), else UnknownModel
    facts = model_from_config("/ckpt/config.json")    # any local config.json of a supported architecture

Both go through one parser: catalog entries are config.json transcriptions stored under
``fp8spec/catalog/models/``. Nothing here touches the network. Decisions (tied ``lm_head``, DeepSeek MTP,
Qwen3-MoE ``mlp_only_layers``, fused groups) are written down in ``fp8spec/catalog/README.md``.
"""

from __future__ import annotations

from ._arch import SUPPORTED_ARCHITECTURES
from ._files import model_from_config
from ._store import catalog_ids, get_model
from ._types import (
    LINEAR_KINDS,
    PARALLEL_STYLES,
    CatalogError,
    ConfigError,
    LinearModule,
    ModelFacts,
    UnknownModel,
    VisionTower,
)

__all__ = [
    "LINEAR_KINDS",
    "PARALLEL_STYLES",
    "SUPPORTED_ARCHITECTURES",
    "CatalogError",
    "ConfigError",
    "LinearModule",
    "ModelFacts",
    "UnknownModel",
    "VisionTower",
    "catalog_ids",
    "get_model",
    "model_from_config",
]
