"""The planner: per-GPU memory, KV capacity and what FP8 buys, before a GPU is booked.

It reads the resolved spec (the rules' context: spec, model facts, backend profiles) and produces numbers;
the same model feeds the MEM rules. Engine arithmetic follows vLLM 0.24.0's code (backends/vllm/0.24.0.yaml
memory.* facts); terms no release states are estimates from fp8spec/data/memory_estimates.yaml.
matplotlib is imported only to draw the PNG (fp8spec.plan.figure).
"""

from fp8spec.plan.plan import MemoryPlan, build_memory_plan
from fp8spec.plan.setup import EngineSetup, Overrides, PlanInputError

__all__ = ["MemoryPlan", "build_memory_plan", "EngineSetup", "Overrides", "PlanInputError"]
