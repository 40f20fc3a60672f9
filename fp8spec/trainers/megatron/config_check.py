"""Run Megatron's own validation on the FP8 fields fp8spec emits, on CPU torch.

megatron-core is pure Python: building its real ``TransformerConfig`` (and ``OptimizerConfig``) runs
``__post_init__``, which rejects e.g. ``first_last_layers_bf16`` with the delayed recipe or
``fp8_param`` without ``fp8``. This needs ``torch`` (CPU is fine) and megatron-core importable::

    pip install --no-deps megatron-core==0.16.1     # the stack's version; pure Python + torch/numpy/packaging

(megatron-core >= 0.17 requires Python >= 3.12 and imports ``triton`` at ``import megatron.core``;
0.16.1 is the newest that imports on Python 3.11 with CPU torch.)

Two things Megatron's dataclasses do not check and this module adds: unknown field names (verl passes
``override_transformer_config`` as ``**kwargs``, so a typo is a TypeError at launch) and values outside a
field's ``Literal[...]`` choices (only Megatron's argparse enforces those; the dataclass accepts them).
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

#: Model dimensions used when the caller gives none: small, valid for every FP8 recipe check.
DEFAULT_MODEL = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4}

#: Megatron ``fp8_recipe`` -> TransformerEngine recipe class (``megatron/core/fp8_utils.get_fp8_recipe``).
TE_RECIPE_FOR = {
    "delayed": "DelayedScaling",
    "tensorwise": "Float8CurrentScaling",
    "blockwise": "Float8BlockScaling",
    "mxfp8": "MXFP8BlockScaling",
    "custom": "CustomRecipe",
}


class MegatronUnavailable(RuntimeError):
    """megatron-core (or torch) cannot be imported here."""


@dataclass
class MegatronCheck:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    version: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


_CACHE: dict[str, Any] = {}


def unavailable_reason() -> str | None:
    """None when megatron-core imports; otherwise why not and how to install it."""
    try:
        _load()
        return None
    except MegatronUnavailable as e:
        return str(e)


def _load() -> dict[str, Any]:
    if "modules" in _CACHE:
        return _CACHE["modules"]
    if "error" in _CACHE:
        raise MegatronUnavailable(_CACHE["error"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed" on CPU
            tc = importlib.import_module("megatron.core.transformer.transformer_config")
            oc = importlib.import_module("megatron.core.optimizer.optimizer_config")
        ver: str | None
        try:
            from importlib.metadata import version

            ver = version("megatron-core")
        except Exception:  # noqa: BLE001 - e.g. on PYTHONPATH without metadata
            info = importlib.import_module("megatron.core.package_info")
            ver = getattr(info, "__version__", None)
    except Exception as e:  # noqa: BLE001 - ImportError, or a dependency failing at import
        _CACHE["error"] = (
            f"megatron-core is not importable ({type(e).__name__}: {e}); install it with "
            "'pip install --no-deps megatron-core==0.16.1' (needs torch, numpy, packaging)"
        )
        raise MegatronUnavailable(_CACHE["error"]) from e
    _CACHE["modules"] = {
        "TransformerConfig": tc.TransformerConfig,
        "OptimizerConfig": oc.OptimizerConfig,
        "version": ver,
    }
    return _CACHE["modules"]


def _literal_choices(cls: type) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - fall back to no choice checks
        return out
    for name, hint in hints.items():
        for member in _flatten(hint):
            if typing.get_origin(member) is typing.Literal:
                out[name] = typing.get_args(member)
    return out


def _flatten(hint: Any) -> list[Any]:
    origin = typing.get_origin(hint)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        out = []
        for a in typing.get_args(hint):
            out.extend(_flatten(a))
        return out
    return [hint]


def _build(cls: type, kwargs: dict[str, Any], result: MegatronCheck, label: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(kwargs) - names)
    for k in unknown:
        result.errors.append(
            f"{label}: unknown field {k!r} (megatron-core {result.version} has no such field)"
        )
    kwargs = {k: v for k, v in kwargs.items() if k in names}
    choices = _literal_choices(cls)
    for k, v in kwargs.items():
        if k in choices and v is not None and v not in choices[k]:
            result.errors.append(f"{label}: {k}={v!r} is not one of {list(choices[k])}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            obj = cls(**kwargs)
        except (ValueError, AssertionError, TypeError, NotImplementedError, RuntimeError) as e:
            result.errors.append(f"{label}: {type(e).__name__}: {e}")
            obj = None
    for w in caught:
        msg = str(w.message)
        if msg not in result.warnings:
            result.warnings.append(msg)
    return obj


def validate_transformer_config(
    overrides: Mapping[str, Any],
    *,
    num_layers: int = DEFAULT_MODEL["num_layers"],
    hidden_size: int = DEFAULT_MODEL["hidden_size"],
    num_attention_heads: int = DEFAULT_MODEL["num_attention_heads"],
    bf16: bool = True,
    model: Mapping[str, Any] | None = None,
    optimizer_overrides: Mapping[str, Any] | None = None,
) -> MegatronCheck:
    """Build Megatron's real ``TransformerConfig`` (and ``OptimizerConfig`` when ``optimizer_overrides``
    is given) from the model dimensions plus ``overrides`` (e.g. verl's ``override_transformer_config``).

    ``model`` adds further model fields (``ffn_hidden_size``, ``num_moe_experts``, parallel sizes, ...).
    Raises :class:`MegatronUnavailable` when megatron-core cannot be imported."""
    mods = _load()
    result = MegatronCheck(version=mods["version"])
    kwargs: dict[str, Any] = {
        "num_layers": num_layers,
        "hidden_size": hidden_size,
        "num_attention_heads": num_attention_heads,
        "bf16": bf16,
    }
    if bf16:
        import torch

        kwargs["params_dtype"] = torch.bfloat16
    kwargs.update(model or {})
    kwargs.update(overrides)
    _build(mods["TransformerConfig"], kwargs, result, "TransformerConfig")
    if optimizer_overrides is not None:
        okw: dict[str, Any] = {"bf16": bf16}
        okw.update(optimizer_overrides)
        _build(mods["OptimizerConfig"], okw, result, "OptimizerConfig")
    return result


def check_transformer_config(
    overrides: Mapping[str, Any],
    num_layers: int = DEFAULT_MODEL["num_layers"],
    hidden_size: int = DEFAULT_MODEL["hidden_size"],
    num_attention_heads: int = DEFAULT_MODEL["num_attention_heads"],
    **kwargs: Any,
) -> list[str]:
    """Error strings from Megatron's own ``TransformerConfig`` validation; empty when it accepts the
    config. Keyword arguments are those of :func:`validate_transformer_config`."""
    return validate_transformer_config(
        overrides,
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        **kwargs,
    ).errors


def check_optimizer_config(overrides: Mapping[str, Any], bf16: bool = True) -> list[str]:
    """Error strings from building Megatron's ``OptimizerConfig`` (e.g. ``{"fp8_recipe": "blockwise"}``)."""
    mods = _load()
    result = MegatronCheck(version=mods["version"])
    okw: dict[str, Any] = {"bf16": bf16}
    okw.update(overrides)
    _build(mods["OptimizerConfig"], okw, result, "OptimizerConfig")
    return result.errors


def check_te_recipe(
    fp8_recipe: str | None,
    recipe_kwargs: Mapping[str, Any] | None = None,
    *,
    te_snapshot: Any = "transformer-engine==2.20.2",
) -> list[str]:
    """Static TransformerEngine check against its snapshot (no CUDA library needed): the TE recipe class
    Megatron builds for ``fp8_recipe`` exists in that release, and every ``recipe_kwargs`` key is a real
    constructor field (a class attribute such as ``fp8_quant_fwd_inp`` is reported: TE fixes it at
    import time from NVTE_* variables and ignores a constructor argument of that name)."""
    from fp8spec.snapshots.query import Snapshot

    snap = te_snapshot if isinstance(te_snapshot, Snapshot) else Snapshot.load(te_snapshot)
    errors: list[str] = []
    if fp8_recipe is None:
        return errors
    cls_name = TE_RECIPE_FOR.get(fp8_recipe)
    if cls_name is None:
        return [
            f"fp8_recipe {fp8_recipe!r} has no TransformerEngine recipe mapping ({sorted(TE_RECIPE_FOR)})"
        ]
    recipe = (snap.data.get("recipes") or {}).get(cls_name)
    if recipe is None:
        return [f"{snap.spec} has no recipe class {cls_name} (needed for fp8_recipe={fp8_recipe!r})"]
    for k in sorted(recipe_kwargs or {}):
        if k in recipe["fields"]:
            continue
        if k in recipe["class_attributes"]:
            errors.append(
                f"{cls_name}.{k} is a class attribute fixed at import time; passing it to the constructor has no "
                "effect (set the NVTE_* environment variable that feeds it before importing transformer_engine)"
            )
        else:
            errors.append(f"{cls_name} has no field {k!r} in {snap.spec}")
    return errors
