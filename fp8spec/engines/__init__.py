"""Rollout engines: everything that differs between vLLM, SGLang, ... lives in the engine's own folder here.

Every package ``fp8spec/engines/<name>/`` is an engine: its ``__init__`` defines ``ENGINE``, an
``fp8spec.engines.base.Engine`` that says, as data, what the engine is called and can do (the predicates rules and
the planner ask). Its parts are modules of the folder, each bound by the engine's name in the layer that uses it:
its memory model (``memory.py``, fp8spec.plan.engine_memory), its rules (``rules.py``, the rule registry), its
adapter in verl and alone with what registers fp8spec's runtime hooks (``adapter.py``,
fp8spec.compiler.adapters.engine). The engines are listed in the order of
backends/stack.yaml, which also gives each one's default version, so adding an engine is one new folder plus
data: its profiles under backends/<name>/ and its line in backends/stack.yaml.

Modelled on vLLM's platform and quantization registries (vllm/platforms/__init__.py,
vllm/model_executor/layers/quantization/__init__.py): callers ask the registry for the object, never compare
names.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from fp8spec.stack import default_stack

if TYPE_CHECKING:
    from fp8spec.engines.base import Engine


class UnknownEngine(LookupError):
    """No engine folder has this name (a caller's mistake: names come from engine_names())."""


@lru_cache(maxsize=1)
def engine_names() -> tuple[str, ...]:
    """Every engine, in the order of backends/stack.yaml (the first is the spec's default)."""
    folders = {m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.ispkg}
    stack = list(default_stack())
    missing = sorted(folders - set(stack))
    if missing:
        raise RuntimeError(
            f"engine folder(s) {', '.join(missing)} have no default version in backends/stack.yaml"
        )
    return tuple(name for name in stack if name in folders)


@lru_cache(maxsize=None)
def get_engine(name: str) -> Engine:
    """The engine called ``name`` (its folder's ENGINE)."""
    if name not in engine_names():
        raise UnknownEngine(f"no rollout engine {name!r}; engines: {', '.join(engine_names())}")
    engine: Engine = importlib.import_module(f"{__name__}.{name}").ENGINE
    if engine.name != name:
        raise RuntimeError(f"fp8spec/engines/{name}/ defines the engine {engine.name!r}")
    return engine


def all_engines() -> tuple[Engine, ...]:
    return tuple(get_engine(name) for name in engine_names())


def engine_part(engine: str, module: str, name: str, kind: type) -> object:
    """The object ``name`` of the engine's part ``fp8spec/engines/<engine>/<module>.py``, checked to be a ``kind``:
    the layer that uses a part binds it by the engine's name, so the descriptors below it import none."""
    part = getattr(importlib.import_module(f"fp8spec.engines.{engine}.{module}"), name)
    if not isinstance(part, kind):
        raise RuntimeError(f"fp8spec/engines/{engine}/{module}.py: {name} is not a {kind.__name__}")
    return part
