"""What a rollout engine is: names and capabilities, as data. One subclass per engine folder
(fp8spec/engines/<name>/__init__.py).

Class attributes are the engine's names and capabilities (plain data the spec format, the rules and the planner
read). What the engine does lives beside it in its folder, at the layer that uses it, and is bound there by the
engine's name: its memory model (``memory.py``, fp8spec.plan.engine_memory), its rules (``rules.py``, loaded by the
rule registry) and its adapter (``adapter.py``, fp8spec.compiler.adapters.engine). So listing engines (the spec's
choices, the profile kinds) imports none of them.
"""

from __future__ import annotations


class Engine:
    # ---------------------------------------------------------------------------------------------- names
    name: str = (
        ""  # rollout.engine, the backend's suffix, the profile kind (backends/<name>/) and stack field
    )
    label: str = ""  # how messages name it: "vLLM"
    stack_description: str = ""  # the spec's stack.<name> field (docs/spec.md)

    # ---------------------------------------------------------------------------------------------- capabilities
    # Block geometry (rule BLK001): which shards the engine checks against the FP8 block grid.
    checks_unsplit_shards: bool = False  # every merged partition, TP-split or not (SGLang)
    ragged_last_partition: bool = False  # an unsplit merged layer's last partition may be ragged (vLLM)
    deep_gemm_switch: bool = False  # linear.deep_gemm compiles to one of its switches (rule BLK004)
    # linear.sync_quantizer direct: fp8spec/runtime/weight_sync/receiver/direct_sync_plan.py reads this engine's
    # loaders (rule BLK006)
    direct_sync_plan: bool = False

    # ---------------------------------------------------------------------------------------------- the planner
    # (row label, EngineMemory field) of the memory terms `fp8spec plan` shows for this engine
    memory_rows: tuple[tuple[str, str], ...] = ()
    runner_labels: dict[str, str] = {}  # EngineMemory.runner -> how `fp8spec plan` names it
    runner_notes: dict[str, str] = {}  # EngineMemory.runner -> a note `plan` prints under the rollout table

    # the memory_estimates.yaml term (section, name) for what the engine's process holds beyond its memory share
    # beside a colocated trainer: a CUDA context, where nothing was measured
    beyond_share_estimate: tuple[str, str] = ("trainer", "cuda_context_bytes")

    @property
    def start_refusal(self) -> str:
        """What happens when trainer and engine together exceed the GPU (rule MEM003's message)."""
        return f"{self.name} cannot reserve its share"

    # ---------------------------------------------------------------------------------------------- the rules
    def owns(self, rule_engine: str) -> bool:
        """Whether a rule declared for ``rule_engine`` (rule(..., engine=...)) is this engine's."""
        return rule_engine == self.name

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
