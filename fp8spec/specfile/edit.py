"""A spec with some fields set to other values, type-checked again (retargeting, candidate fixes, init)."""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import ValidationError

from fp8spec.specfile.model import Spec


class EditError(ValueError):
    """The changed spec does not type-check (the change is not a value the field takes)."""


def with_values(spec: Spec, changes: Mapping[str, Any]) -> Spec:
    """``spec`` with each dotted field in ``changes`` set (``{"rollout.tp": 4}``), validated as a file is."""
    if not changes:
        return spec
    data = spec.model_dump(mode="python")
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            raise EditError(f"{dotted} is not a spec field")
        node[last] = list(value) if isinstance(value, tuple) else value
    try:
        return Spec.model_validate(data)
    except ValidationError as err:
        raise EditError(f"{', '.join(changes)}: {err.errors()[0].get('msg', 'invalid')}") from None
