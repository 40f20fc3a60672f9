"""vLLM: the engine verl pins by default (backends/vllm/<version>.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8spec.engines.base import Engine

if TYPE_CHECKING:
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.plan import Plan
    from fp8spec.resolve.valid import ValidSpec


class VLLM(Engine):
    name = "vllm"
    label = "vLLM"
    stack_description = "vLLM release (used with rollout.engine vllm). Default: the one verl pins."
    # validate_fp8_block_shape (vllm/.../quantization/utils/fp8_utils.py) checks TP-split shards and merged
    # layers, and lets the last partition of a merged layer that is not TP-split be ragged
    ragged_last_partition = True
    deep_gemm_switch = True  # VLLM_USE_DEEP_GEMM (vllm/envs.py)

    def build_in_verl(self, plan: Plan, valid: ValidSpec, keys: VerlKeys) -> None:
        from fp8spec.engines.vllm.adapter import build_in_verl

        build_in_verl(plan, valid, keys)

    def build_serve(self, plan: Plan, valid: ValidSpec) -> list[str]:
        from fp8spec.engines.vllm.adapter import build_serve

        return build_serve(plan, valid)

    def load_rules(self) -> None:
        import fp8spec.engines.vllm.rules  # noqa: F401  (importing registers them)


ENGINE = VLLM()
