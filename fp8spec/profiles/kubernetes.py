"""Limits of the Kubernetes API server that rayjob.yaml must respect (``backends/kubernetes/limits.yaml``)."""

from __future__ import annotations

from functools import lru_cache

from ruamel.yaml import YAML

from fp8spec.resources import data_dir


@lru_cache(maxsize=None)
def kubernetes_limit(name: str) -> int:
    """A limit by name (e.g. ``configmap_max_bytes``); KeyError for one the file does not record."""
    with open(data_dir("backends") / "kubernetes" / "limits.yaml", encoding="utf-8") as fh:
        facts = YAML(typ="safe", pure=True).load(fh)
    return int(facts[name]["value"])
