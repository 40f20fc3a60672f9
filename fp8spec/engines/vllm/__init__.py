"""vLLM: the engine verl pins by default (backends/vllm/<version>.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from fp8spec.engines.base import Engine

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.plan.facts import ProfileFacts
    from fp8spec.plan.setup import EngineMemory, EngineSetup
    from fp8spec.resolve.valid import ValidSpec


class VLLM(Engine):
    name = "vllm"
    label = "vLLM"
    stack_description = "vLLM release (used with rollout.engine vllm). Default: the one verl pins."
    # validate_fp8_block_shape (vllm/.../quantization/utils/fp8_utils.py) checks TP-split shards and merged
    # layers, and lets the last partition of a merged layer that is not TP-split be ragged
    ragged_last_partition = True
    deep_gemm_switch = True  # VLLM_USE_DEEP_GEMM (vllm/envs.py)
    direct_sync_plan = True  # direct_sync_plan.py follows vLLM 0.24.0's mappings and loaders
    memory_rows = (
        ("requested (total x utilization)", "requested"),
        ("activation peak (estimate)", "activation_peak"),
        ("non-torch memory (estimate)", "non_torch"),
        ("CUDA graph estimate", "cudagraph"),
    )
    runner_labels = {"v1": "vLLM V1 model runner", "v2": "vLLM V2 model runner"}
    # what `plan` says under the rollout table for a runner (why a row reads as it does)
    runner_notes = {
        "v2": "CUDA graph estimate 0.00 GiB: this vLLM release runs this architecture on its V2 model runner, "
        "whose profile_cudagraph_memory returns 0, so nothing is deducted for CUDA graphs before the KV cache is "
        "sized (the vLLM profile's memory.v2_runner_architectures); after capture the graphs take 0.8-1.0 GiB on "
        "top of gpu_memory_utilization (measured:rollout.vllm.cuda_graph_memory_gib), inside the 2 GiB "
        "every proposed memory fix leaves"
    }

    @property
    def start_refusal(self) -> str:
        return (
            "vLLM refuses to start ('Free memory on device ... is less than desired GPU memory utilization')"
        )

    @property
    def memory_source(self) -> str:
        from fp8spec.engines.vllm.memory import memory_model_version

        version = memory_model_version()
        return f"backends/vllm/{version}.yaml memory.* facts (vLLM {version} source, file:line)"

    def memory_facts(self, version: str) -> ProfileFacts:
        from fp8spec.engines.vllm.memory import memory_facts

        return memory_facts(version)

    def engine_memory(
        self,
        model: ModelFacts,
        setup: EngineSetup,
        weights: int,
        facts: ProfileFacts,
        quantized: Optional[frozenset[str]],
    ) -> tuple[EngineMemory, int]:
        from fp8spec.engines.vllm.memory import vllm_engine_memory

        memory = vllm_engine_memory(model, setup, weights, facts, fp8_linear=quantized is not None)
        return memory, facts.value("memory.block_size")

    def memory_notes(self, setup: EngineSetup, facts: ProfileFacts) -> list[str]:
        from fp8spec.engines.vllm.memory import memory_notes

        return memory_notes(setup, facts)

    def build_in_verl(self, plan: SettingsPlan, valid: ValidSpec, keys: VerlKeys) -> None:
        from fp8spec.engines.vllm.adapter import build_in_verl

        build_in_verl(plan, valid, keys)

    def build_serve(self, plan: SettingsPlan, valid: ValidSpec) -> list[str]:
        from fp8spec.engines.vllm.adapter import build_serve

        return build_serve(plan, valid)

    def load_rules(self) -> None:
        import fp8spec.engines.vllm.rules  # noqa: F401  (importing registers them)


ENGINE = VLLM()
