"""The typed FP8-RL spec: the pydantic model, the YAML loader that keeps positions, and the JSON Schema."""

from fp8spec.specfile.model import Spec

__all__ = ["Spec"]
