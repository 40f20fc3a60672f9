"""The tested stack, kept as data in backends/stack.yaml: each package's spec field and its default version.

Its order is the order fp8spec lists packages in (profile kinds, the spec's ``stack`` fields, engines).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def default_stack() -> dict[str, str]:
    """Spec ``stack`` field -> its default version (the tested stack), in the file's order."""
    from ruamel.yaml import YAML

    from fp8spec.resources import data_dir

    with open(data_dir("backends") / "stack.yaml", encoding="utf-8") as fh:
        return {str(k): str(v) for k, v in YAML(typ="safe").load(fh).items()}


def kind_of(stack_field: str) -> str:
    """The profile kind (backends/<kind>/) a stack field pins: megatron_core -> megatron-core."""
    return stack_field.replace("_", "-")
