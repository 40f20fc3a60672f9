"""verl extractor: the fully composed Hydra config trees, composed from the wheel's own YAML files.

Only ``verl/trainer/config/**`` is taken from the wheel (extracted into a temporary folder); Hydra's
compose API builds the trees, so no verl code is imported. Each tree is stored flat:

- ``keys``: every leaf path (``a.b.c``) with its raw YAML value. Interpolations stay as their
  ``${...}`` text and mandatory values as ``???``; lists are leaves.
- ``mappings``: every mapping node path (a key under one can be overridden with ``a.b.x=...`` only if
  it is in ``keys``/``mappings``; a new key needs ``+a.b.x=...``).
- ``open_mappings``: empty mapping nodes (``{}``), i.e. pass-through dicts such as
  ``actor_rollout_ref.rollout.engine_kwargs.vllm`` whose keys are free-form and must be added with ``+``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .artifacts import Artifact

EXTRACTOR_VERSION = 1

CONFIG_PREFIX = "verl/trainer/config/"

#: name -> (config_name, overrides). The compiler targets these two trees.
COMPOSITIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ppo_trainer": ("ppo_trainer", ()),
    "ppo_trainer+model_engine=megatron": ("ppo_trainer", ("model_engine=megatron",)),
}


def extract(art: Artifact) -> dict[str, Any]:
    try:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import OmegaConf
    except ImportError as e:  # pragma: no cover - exercised only without the test extras
        raise RuntimeError(
            "composing verl's config needs hydra-core and omegaconf (pip install hydra-core==1.3.8)"
        ) from e
    with tempfile.TemporaryDirectory(prefix="fp8spec-verl-") as tmp:
        config_dir = art.extract_prefix(CONFIG_PREFIX, Path(tmp))
        groups = _config_groups(config_dir)
        configs: dict[str, Any] = {}
        for name, (config_name, overrides) in sorted(COMPOSITIONS.items()):
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base=None):
                cfg = compose(config_name=config_name, overrides=list(overrides))
                container = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
            GlobalHydra.instance().clear()
            keys: dict[str, Any] = {}
            mappings: list[str] = []
            open_mappings: list[str] = []
            _flatten(container, "", keys, mappings, open_mappings)
            configs[name] = {
                "config_name": config_name,
                "overrides": list(overrides),
                "keys": keys,
                "mappings": sorted(mappings),
                "open_mappings": sorted(open_mappings),
            }
    return {
        "sources": [CONFIG_PREFIX + "**.yaml"],
        "configs": configs,
        "config_groups": groups,
        "note": "Hydra struct mode: overriding a path in keys needs no prefix; adding a path absent from the "
        "tree needs '+' and is only possible under a mapping (an open mapping accepts any key).",
    }


def _flatten(
    node: Any, prefix: str, keys: dict[str, Any], mappings: list[str], open_mappings: list[str]
) -> None:
    if isinstance(node, dict):
        if prefix:
            mappings.append(prefix)
            if not node:
                open_mappings.append(prefix)
        for k in sorted(node, key=str):
            path = f"{prefix}.{k}" if prefix else str(k)
            _flatten(node[k], path, keys, mappings, open_mappings)
    else:
        keys[prefix] = _plain(node)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _config_groups(config_dir: Path) -> dict[str, list[str]]:
    """Hydra config groups (sub-folders) and their options (YAML file stems)."""
    groups: dict[str, list[str]] = {}
    for sub in sorted(p for p in config_dir.rglob("*") if p.is_dir()):
        options = sorted(p.stem for p in sub.glob("*.yaml"))
        if options:
            groups[sub.relative_to(config_dir).as_posix()] = options
    return groups
