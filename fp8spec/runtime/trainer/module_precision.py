"""module_precision, trainer side: the spec's training.bf16_modules as megatron-core's per-module quant_recipe.

megatron-core (0.18.2) decides per TransformerEngine module whether it runs FP8 through
``TransformerConfig.quant_recipe`` (``megatron/core/transformer/transformer_config.py`` line 1108), a
``RecipeConfig`` whose glob matchers see each module's name in ``GPTModel.named_modules()`` after the build
(``models/gpt/gpt_model.py`` lines 284-287; first match wins, ``quantization/quant_config.py``). A matched module
whose ``training_recipe`` names no FP8 recipe runs inside ``fp8_autocast(enabled=False)``: BF16 inside the model's
FP8 autocast (``extensions/transformer_engine.py`` lines 275-285). verl 0.9.1 hands
``override_transformer_config`` to ``TransformerConfig`` as keyword arguments
(``verl/workers/engine/megatron/transformer_impl.py`` lines 295, 332): a Hydra override carries a dict, never the
``RecipeConfig`` object, so this patch builds it in the trainer process, at the end of
``TransformerConfig.__post_init__``, from the module classes named in ``FP8SPEC_BF16_MODULES``.

The class table (``MODULE_GLOBS``) is plain data that ``te_report`` shares to group its counts; it must equal the
megatron-core profile's ``quant.module_classes`` (tests/runtime/test_module_precision.py).
"""

from __future__ import annotations

import fnmatch
import functools
import logging
from types import ModuleType
from typing import Any, Optional

from fp8spec.runtime import envs

logger = logging.getLogger(__name__)

# Module class -> glob over megatron-core module names (decoder.layers.<i>.<...>): TransformerLayer's
# self_attention and mlp (transformer_layer.py:362, :420), MoELayer's experts and shared_experts (moe_layer.py:326,
# :338), a dense MLP's linear_fc1/linear_fc2 (mlp.py). Experts match whole: TEGroupedMLP's linear_fc1/fc2 and
# SequentialMLP's local_experts.<j>.linear_fc1/fc2 alike.
MODULE_GLOBS: dict[str, str] = {
    "attention": "*.self_attention.*",
    "dense_mlp": "*.mlp.linear_fc*",
    "experts": "*.mlp.experts.*",
    "shared_experts": "*.mlp.shared_experts.*",
}
BF16_CONFIG = "fp8spec_bf16"


def module_class(name: str) -> Optional[str]:
    """The class of the module named ``name`` (its path in the model), first match as megatron-core matches."""
    for cls, pattern in MODULE_GLOBS.items():
        if fnmatch.fnmatch(name, pattern):
            return cls
    return None


def recipe_dict(classes: list[str]) -> dict[str, Any]:
    """The RecipeConfig.from_config_dict input that keeps ``classes`` in BF16 and leaves every other module to the
    model-wide recipe (no matcher: no override)."""
    return {
        # an empty training_recipe: no FP8/FP4 recipe, so the module runs in fp8_autocast(enabled=False)
        "configs": {
            BF16_CONFIG: {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": {}}
        },
        "matchers": {
            c: {"type": "glob", "pattern": MODULE_GLOBS[c], "config": BF16_CONFIG, "enabled": True}
            for c in classes
        },
    }


def with_bf16_modules(orig: Any, classes: list[str]) -> Any:
    """Wrap ``TransformerConfig.__post_init__``: an FP8 config without a quant_recipe of its own gets the BF16
    classes' recipe."""
    from megatron.core.quantization.quant_config import RecipeConfig

    recipe = recipe_dict(classes)

    @functools.wraps(orig)
    def __post_init__(self):
        orig(self)
        if not self.fp8 or self.quant_recipe is not None:
            return
        if self.fp8_param:
            # the parameters are created in FP8 while the model is built, before the per-module configs are
            # assigned (gpt_model.py:284-287): a BF16 class would compute with FP8-stored weights
            raise ValueError(
                "fp8spec module_precision: fp8_param keeps every TE weight in FP8; the BF16 module classes "
                f"{', '.join(classes)} need BF16 weights (remove fp8_param or training.bf16_modules)"
            )
        self.quant_recipe = RecipeConfig.from_config_dict(recipe)
        if "experts" in classes and getattr(self, "use_transformer_engine_op_fuser", False):
            # the op fuser calls its fused ops directly, not TEGroupedLinear.forward, so the override never opens
            # (moe/experts.py:551-622): te_report then shows the experts in FP8
            logger.warning(
                "fp8spec module_precision: the TE op fuser ignores quant_recipe; the experts run FP8"
            )
        logger.info("fp8spec module_precision: TransformerEngine runs %s in BF16", ", ".join(classes))

    __post_init__._fp8spec_patched = True  # type: ignore[attr-defined]
    return __post_init__


def patch_transformer_config(module: ModuleType, env: Optional[dict[str, str]] = None) -> bool:
    """Install the wrapper on ``TransformerConfig``; False when no class is named or it is installed already."""
    classes = envs.BF16_MODULES.read(env)
    cls = getattr(module, "TransformerConfig", None)
    if not classes or cls is None or getattr(cls.__post_init__, "_fp8spec_patched", False):
        return False
    cls.__post_init__ = with_bf16_modules(cls.__post_init__, classes)
    return True
