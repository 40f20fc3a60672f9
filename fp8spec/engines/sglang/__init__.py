"""SGLang: the other engine verl pins (backends/sglang/<version>.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from fp8spec.engines.base import Engine

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.plan.facts import ProfileFacts
    from fp8spec.plan.setup import EngineMemory, EngineSetup
    from fp8spec.resolve.valid import ValidSpec


class SGLang(Engine):
    name = "sglang"
    label = "SGLang"
    stack_description = "SGLang release (used with rollout.engine sglang). Default: the one verl pins."
    # Fp8LinearMethod.validate_block_quant_shapes checks every merged partition, split or not
    checks_unsplit_shards = True
    memory_rows = (
        ("free x mem_fraction_static", "requested"),
        ("FP8 dummy-init cache", "load_cache"),
    )
    runner_labels = {"sglang": "SGLang pool"}

    @property
    def memory_source(self) -> str:
        from fp8spec.engines.sglang.memory import READ_FROM

        return f"fp8spec/engines/sglang/memory.py (SGLang {READ_FROM})"

    def memory_facts(self, version: str) -> ProfileFacts:
        # The pool holds whole tokens (page size 1) of the same per-token size; the vocabulary padding and the KV
        # element sizes are read from vLLM's profiled memory facts, whatever SGLang version is pinned.
        from fp8spec.engines import get_engine
        from fp8spec.engines.vllm.memory import memory_model_version

        return get_engine("vllm").memory_facts(memory_model_version())

    def engine_memory(
        self,
        model: ModelFacts,
        setup: EngineSetup,
        weights: int,
        facts: ProfileFacts,
        quantized: Optional[frozenset[str]],
    ) -> tuple[EngineMemory, int]:
        from fp8spec.engines.sglang.memory import sglang_engine_memory

        return sglang_engine_memory(model, setup, weights, quantized), 1

    def memory_notes(self, setup: EngineSetup, facts: ProfileFacts) -> list[str]:
        from fp8spec.engines.sglang.memory import memory_notes

        return memory_notes(setup, facts)

    def build_in_verl(self, plan: SettingsPlan, valid: ValidSpec, keys: VerlKeys) -> None:
        from fp8spec.engines.sglang.adapter import build_in_verl

        build_in_verl(plan, valid, keys)

    def build_serve(self, plan: SettingsPlan, valid: ValidSpec) -> list[str]:
        from fp8spec.engines.sglang.adapter import build_serve

        return build_serve(plan, valid)

    def patch_engine_args(self, patch: str) -> dict[str, Any]:
        from fp8spec.engines.sglang.adapter import patch_engine_args

        return patch_engine_args(patch)

    def load_rules(self) -> None:
        import fp8spec.engines.sglang.rules  # noqa: F401  (importing registers them)


ENGINE = SGLang()
