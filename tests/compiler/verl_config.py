"""verl 0.9.1's own Hydra config tree (the one in the installed verl wheel), composed as verl's main_ppo composes it."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any


def verl_config_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl is not installed"
    return Path(spec.submodule_search_locations[0]) / "trainer" / "config"


# override list -> verl's composed tree. Composing is the suite's dearest step (tens of seconds for a Megatron bundle
# on a loaded 2-core machine), and the golden, compose and conformance tests compose the same bundles: once per
# process (an xdist worker; tests/conftest.py keeps a bundle's tests on one worker), a copy for each caller.
_COMPOSED: dict[tuple[str, ...], Any] = {}


def compose(overrides: list[str]):
    key = tuple(overrides)
    if key not in _COMPOSED:
        _COMPOSED[key] = _compose(list(key))  # a refused list raises, and is composed again when asked again
    return copy.deepcopy(_COMPOSED[key])


def _compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def leaves(cfg: Any) -> dict[str, str]:
    """Dotted key -> the leaf's value as JSON (interpolations kept as written, lists and empty maps whole)."""
    from omegaconf import OmegaConf

    out: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        else:
            out[prefix] = json.dumps(node, sort_keys=True)

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return out
