"""Each rollout engine's adapter: ``ADAPTER`` in its folder's ``adapter.py`` (fp8spec/engines/<name>/adapter.py).

The engine's descriptor (its folder's ``__init__``) is data the spec format reads; what the engine compiles to is
compiler code, so the compiler binds it here by the engine's name, and listing engines imports none of it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from fp8spec.engines import engine_part

if TYPE_CHECKING:
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.resolve.valid import ValidSpec


class EngineAdapter:
    """What the compiler asks of an engine. One subclass per engine folder, its ``adapter.py``'s ``ADAPTER``."""

    def build_in_verl(self, plan: SettingsPlan, valid: ValidSpec, keys: VerlKeys) -> None:
        """The engine's settings inside a verl run (engine_kwargs, environment)."""
        raise NotImplementedError

    def build_serve(self, plan: SettingsPlan, valid: ValidSpec) -> list[str]:
        """argv of the standalone server that evaluates the FP8 policy; its settings go into ``plan``."""
        raise NotImplementedError

    def patch_engine_args(self, patch: str) -> dict[str, Any]:
        """What registers fp8spec's runtime ``patch`` in this engine: engine-argument fact id of its profile ->
        value (the FP8 KV cache itself is set by kv_cache.dtype)."""
        return {}


@lru_cache(maxsize=None)
def engine_adapter(engine: str) -> EngineAdapter:
    """The adapter of the engine called ``engine`` (a name from fp8spec.engines.engine_names())."""
    return cast(EngineAdapter, engine_part(engine, "adapter", "ADAPTER", EngineAdapter))
