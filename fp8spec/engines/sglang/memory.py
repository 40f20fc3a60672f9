"""KV memory the way SGLang 0.5 sizes its pool (verl passes gpu_memory_utilization as mem_fraction_static).

    rest = free_after_load - free_before_load * (1 - mem_fraction_static)
         = free_before_load * mem_fraction_static - weights
    tokens = rest // cell_size   (cell_size: KV bytes of one token over all layers; page size 1)

(sglang/srt/model_executor/model_runner_kv_cache_mixin.py:62-76, pool_configurator.py:125-187 in 0.5.12.)
Activations and CUDA graphs come out of the (1 - mem_fraction_static) remainder, so they do not reduce
the pool. ``free_before_load`` is the total minus an estimated CUDA context.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fp8spec.plan.facts import ProfileFacts, estimate
from fp8spec.plan.setup import EngineMemory

if TYPE_CHECKING:
    from fp8spec.plan.setup import EngineSetup

# The SGLang release the pool's formula was read from (cited in `fp8spec plan -f json`'s sources).
READ_FROM = "0.5.12"


def sglang_engine_memory(s: EngineSetup, weights: int) -> EngineMemory:
    context = int(estimate("sglang", "context_bytes"))
    free_before = s.total_bytes - context
    share = math.floor(free_before * s.utilization)
    return EngineMemory(
        share, weights, 0, 0, 0, "sglang", {"free_before_load": free_before, "context_estimate": context}
    )


def memory_notes(setup: EngineSetup, facts: ProfileFacts) -> list[str]:
    return [
        f"SGLang {setup.engine_version}: KV pool = free memory x mem_fraction_static - weights "
        "(SGLang 0.5's formula); the vLLM-specific terms do not apply"
    ]
