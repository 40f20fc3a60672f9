"""The spec's `stack:` section: one version field per package of backends/stack.yaml, made from that data (each
rollout engine's folder describes its own field), so a new engine needs no edit here."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from pydantic import Field, create_model

from fp8spec.engines import get_engine
from fp8spec.specfile.fields import Section, Version
from fp8spec.stack import default_stack

# The trainer side of the stack; each rollout engine describes its own field (fp8spec/engines/<name>/).
_STACK_DESCRIPTIONS = {
    "verl": "verl release the bundle is compiled for. Default: the tested stack.",
    "megatron_core": "megatron-core release (used with training.backend megatron). Default: the tested stack.",
    "transformer_engine": "TransformerEngine release (used with training.backend megatron). Default: the tested stack.",
}


def _default_version(field: str) -> str:
    return default_stack()[field]


def _stack_section() -> type[Section]:
    """One version field per package of backends/stack.yaml, in its order (every engine folder brings its own)."""
    fields: dict = {}
    for field in default_stack():
        description = _STACK_DESCRIPTIONS.get(field) or get_engine(field).stack_description
        fields[field] = (
            Version,
            Field(default_factory=partial(_default_version, field), description=description),
        )
    return create_model("StackSection", __base__=Section, __module__=__name__, **fields)


if TYPE_CHECKING:

    class StackSection(Section):  # what type checkers see; the class itself is made above, from the data
        verl: str = ""
        megatron_core: str = ""
        transformer_engine: str = ""

        def __getattr__(self, engine: str) -> str: ...  # each engine's version, under its name

else:
    StackSection = _stack_section()
