"""SGLang: the other engine verl pins (backends/sglang/<version>.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fp8spec.engines.base import Engine

if TYPE_CHECKING:
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.plan import Plan
    from fp8spec.resolve.valid import ValidSpec


class SGLang(Engine):
    name = "sglang"
    label = "SGLang"
    stack_description = "SGLang release (used with rollout.engine sglang). Default: the one verl pins."
    # Fp8LinearMethod.validate_block_quant_shapes checks every merged partition, split or not
    checks_unsplit_shards = True

    def build_in_verl(self, plan: Plan, valid: ValidSpec, keys: VerlKeys) -> None:
        from fp8spec.engines.sglang.adapter import build_in_verl

        build_in_verl(plan, valid, keys)

    def build_serve(self, plan: Plan, valid: ValidSpec) -> list[str]:
        from fp8spec.engines.sglang.adapter import build_serve

        return build_serve(plan, valid)

    def patch_engine_args(self, patch: str) -> dict[str, Any]:
        from fp8spec.engines.sglang.adapter import patch_engine_args

        return patch_engine_args(patch)

    def load_rules(self) -> None:
        import fp8spec.engines.sglang.rules  # noqa: F401  (importing registers them)


ENGINE = SGLang()
