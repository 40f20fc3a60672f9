"""Each rollout engine's memory model: ``MODEL`` in its folder's memory.py (fp8spec/engines/<name>/memory.py).

The engine's descriptor (its folder's ``__init__``) is data the spec format reads; its memory model is planner code,
so the planner binds it here by the engine's name, and listing engines imports none of it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Optional, cast

from fp8spec.engines import engine_part

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.facts import ProfileFacts
    from fp8spec.plan.setup import EngineMemory, EngineSetup


class EngineMemoryModel:
    """What the planner asks of an engine. One subclass per engine folder, its ``memory.py``'s ``MODEL``."""

    @property
    def memory_source(self) -> str:
        """Where the engine's memory model comes from (`fp8spec plan -f json` sources)."""
        return ""

    def memory_facts(self, version: str) -> ProfileFacts:
        """The memory.* profile facts the planner reads for this engine at ``version``."""
        raise NotImplementedError

    def engine_memory(
        self,
        model: ModelFacts,
        setup: EngineSetup,
        weights: int,
        facts: ProfileFacts,
        quantized: Optional[frozenset[str]],
    ) -> tuple[EngineMemory, int]:
        """The engine's memory at start-up, and the KV block size (tokens per page) it allocates in.
        ``quantized`` names the FP8 linears (None: a BF16 engine)."""
        raise NotImplementedError

    def memory_notes(self, setup: EngineSetup, facts: ProfileFacts) -> list[str]:
        """What the plan should say about the model it used for this engine."""
        return []


@lru_cache(maxsize=None)
def memory_model(engine: str) -> EngineMemoryModel:
    """The memory model of the engine called ``engine`` (a name from fp8spec.engines.engine_names())."""
    return cast(EngineMemoryModel, engine_part(engine, "memory", "MODEL", EngineMemoryModel))
