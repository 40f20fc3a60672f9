"""What fp8spec asks of a rollout engine. One subclass per engine folder (fp8spec/engines/<name>/__init__.py).

Class attributes are the engine's names and capabilities (plain data the rules and the planner read); methods
reach its parts, each a module of the engine's folder imported on first use, so listing engines (the spec's
choices, the profile kinds) imports no adapter, memory model or rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.compiler.adapters.verl import VerlKeys
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.plan.facts import ProfileFacts
    from fp8spec.plan.setup import EngineMemory, EngineSetup
    from fp8spec.resolve.valid import ValidSpec


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

    @property
    def memory_source(self) -> str:
        """Where the engine's memory model comes from (`fp8spec plan -f json` sources)."""
        return ""

    @property
    def start_refusal(self) -> str:
        """What happens when trainer and engine together exceed the GPU (rule MEM003's message)."""
        return f"{self.name} cannot reserve its share"

    def memory_facts(self, version: str) -> ProfileFacts:
        """The memory.* profile facts the planner reads for this engine at ``version``."""
        raise NotImplementedError(f"{self.name} has no memory model")

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
        raise NotImplementedError(f"{self.name} has no memory model")

    def memory_notes(self, setup: EngineSetup, facts: ProfileFacts) -> list[str]:
        """What the plan should say about the model it used for this engine."""
        return []

    # ---------------------------------------------------------------------------------------------- the compiler
    def build_in_verl(self, plan: SettingsPlan, valid: ValidSpec, keys: VerlKeys) -> None:
        """The engine's settings inside a verl run (engine_kwargs, environment)."""
        raise NotImplementedError(f"{self.name} has no verl adapter")

    def build_serve(self, plan: SettingsPlan, valid: ValidSpec) -> list[str]:
        """argv of the standalone server that evaluates the FP8 policy; its settings go into ``plan``."""
        raise NotImplementedError(f"{self.name} has no standalone server")

    def patch_engine_args(self, patch: str) -> dict[str, Any]:
        """What registers fp8spec's runtime ``patch`` in this engine: engine-argument fact id of its profile ->
        value (the FP8 KV cache itself is set by kv_cache.dtype)."""
        return {}

    # ---------------------------------------------------------------------------------------------- the rules
    def owns(self, rule_engine: str) -> bool:
        """Whether a rule declared for ``rule_engine`` (rule(..., engine=...)) is this engine's."""
        return rule_engine == self.name

    def load_rules(self) -> None:
        """Import the engine's own rule module (registering its rules), if it has one."""

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
