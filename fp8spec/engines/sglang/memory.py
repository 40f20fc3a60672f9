"""KV memory the way SGLang 0.5 sizes its pool (verl passes gpu_memory_utilization as mem_fraction_static).

    rest = free_after_load - free_before_load * (1 - mem_fraction_static)
         = free_before_load * mem_fraction_static - weights
    tokens = rest // cell_size   (cell_size: KV bytes of one token over all layers; page size 1)

(sglang/srt/model_executor/model_runner_kv_cache_mixin.py:62-76, pool_configurator.py:125-187 in 0.5.12.)
Activations and CUDA graphs come out of the (1 - mem_fraction_static) remainder, so they do not reduce
the pool. ``free_before_load`` is the total minus an estimated CUDA context.

``weights`` is what the load leaves used, and with FP8 weights that is more than the parameters: verl starts
SGLang with dummy weights, and SGLang's dummy init fills each FP8 parameter through a float16 copy
(``tmp = param.to(float16).uniform_(...).to(fp8)``, model_loader/weight_utils.py:1462-1467), so the caching
allocator keeps the blocks of the largest one, 2 + 1 bytes per element, reserved when the pool is sized.
Measured on the H200 (docs/results.md#planner-accuracy): 0.37 GiB over the parameters for Qwen3-8B (largest: gate_up_proj,
0.28 GiB modelled) and 1.26 GiB for Qwen3-30B-A3B (a layer's stacked w13, 1.125 GiB modelled); the rest is
the blocks of earlier, smaller parameters.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from fp8spec.engines.vllm import memory as vllm_memory
from fp8spec.plan.engine_memory import EngineMemoryModel
from fp8spec.plan.facts import ProfileFacts, estimate
from fp8spec.plan.setup import EngineMemory
from fp8spec.plan.weights import Sharding, largest_fp8_parameter

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.setup import EngineSetup

# The SGLang release the pool's formula was read from (cited in `fp8spec plan -f json`'s sources).
READ_FROM = "0.5.12"


# float16 copy + float8 result of the largest FP8 parameter, both alive in the dummy init's one expression
DUMMY_INIT_BYTES_PER_ELEMENT = 2 + 1


def sglang_engine_memory(
    model: ModelFacts, s: EngineSetup, weights: int, quantized: Optional[frozenset[str]]
) -> EngineMemory:
    context = int(estimate("sglang", "context_bytes"))
    free_before = s.total_bytes - context
    share = math.floor(free_before * s.utilization)
    load_cache = 0
    if quantized:
        largest = largest_fp8_parameter(model, Sharding(s.tp, s.ep), quantized)
        load_cache = DUMMY_INIT_BYTES_PER_ELEMENT * largest
    return EngineMemory(
        share,
        weights,
        0,
        0,
        0,
        "sglang",
        {"free_before_load": free_before, "context_estimate": context, "dummy_init_cache": load_cache},
        load_cache,
    )


def memory_notes(setup: EngineSetup, facts: ProfileFacts) -> list[str]:
    return [
        f"SGLang {setup.engine_version}: KV pool = free memory x mem_fraction_static - weights "
        "(SGLang 0.5's formula) - the float16 copy of the largest FP8 weight that SGLang's dummy init "
        "leaves cached; the vLLM-specific terms do not apply"
    ]


class SGLangMemory(EngineMemoryModel):
    @property
    def memory_source(self) -> str:
        return f"fp8spec/engines/sglang/memory.py (SGLang {READ_FROM})"

    def memory_facts(self, version: str) -> ProfileFacts:
        # The pool holds whole tokens (page size 1) of the same per-token size; the vocabulary padding and the KV
        # element sizes are read from vLLM's profiled memory facts, whatever SGLang version is pinned.
        return vllm_memory.memory_facts(vllm_memory.memory_model_version())

    def engine_memory(
        self,
        model: ModelFacts,
        setup: EngineSetup,
        weights: int,
        facts: ProfileFacts,
        quantized: Optional[frozenset[str]],
    ) -> tuple[EngineMemory, int]:
        return sglang_engine_memory(model, setup, weights, quantized), 1

    def memory_notes(self, setup: EngineSetup, facts: ProfileFacts) -> list[str]:
        return memory_notes(setup, facts)


MODEL = SGLangMemory()
