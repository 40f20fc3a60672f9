"""Shapes of checkpoint module names: 'model.layers.3.mlp.experts.17.gate_proj' -> 'model.layers.*.mlp.experts.*.gate_proj'."""

from __future__ import annotations

import re

_INDEX = re.compile(r"\.\d+(?=\.|$)")


def shape_pattern(name: str) -> str:
    """The name with every numeric component (layer, expert) replaced by '*'."""
    return _INDEX.sub(".*", name)
