"""SGLang: the other engine verl pins (backends/sglang/<version>.yaml)."""

from __future__ import annotations

from fp8spec.engines.base import Engine


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


ENGINE = SGLang()
