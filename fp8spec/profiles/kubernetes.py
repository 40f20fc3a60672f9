"""What rayjob.yaml must respect: the Kubernetes API server's limits (``backends/kubernetes/limits.yaml``) and the
environment names a pod may not take from a Secret (``backends/kubernetes/pod_env.yaml``)."""

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


@lru_cache(maxsize=None)
def _pod_env() -> dict:
    with open(data_dir("backends") / "kubernetes" / "pod_env.yaml", encoding="utf-8") as fh:
        return YAML(typ="safe", pure=True).load(fh)


def reserved_pod_env(name: str) -> bool:
    """Whether ``name`` belongs to the process, Ray or the GPU assignment (pod_env.yaml), not to a Secret."""
    facts = _pod_env()
    return name in facts["reserved_names"]["value"] or any(
        name.startswith(p) for p in facts["reserved_prefixes"]["value"]
    )
