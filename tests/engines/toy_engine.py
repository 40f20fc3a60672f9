"""A toy rollout engine, written the way a newcomer adds one: a folder under fp8spec/engines/ plus data (its
profile under backends/toy/ and its line in backends/stack.yaml). Its descriptor (names and capabilities) is the
folder's __init__; beside it are its memory model, its adapter with one setting (an environment variable read from
its profile) and one rule (TOY001); the rest of fp8spec finds each by the engine's name."""

ENGINE_INIT = '''"""Toy: a rollout engine that exists only in a test."""

from __future__ import annotations

from fp8spec.engines.base import Engine


class Toy(Engine):
    name = "toy"
    label = "Toy"
    stack_description = "Toy release (used with rollout.engine toy)."
    memory_rows = (("requested (total x utilization)", "requested"),)
    runner_labels = {"toy": "toy pool"}


ENGINE = Toy()
'''

ENGINE_MEMORY = '''"""The toy engine's memory model."""

from __future__ import annotations

import math
from typing import Any

from fp8spec.plan.engine_memory import EngineMemoryModel
from fp8spec.plan.facts import profile_facts
from fp8spec.plan.setup import EngineMemory


class ToyMemory(EngineMemoryModel):
    @property
    def memory_source(self) -> str:
        return "backends/toy memory.* facts"

    def memory_facts(self, version: str) -> Any:
        return profile_facts("toy", version, version, "memory.kv_dtype_bytes")

    def engine_memory(self, model, setup, weights, facts, quantized):
        requested = math.floor(setup.total_bytes * setup.utilization)
        return EngineMemory(requested, weights, 0, 0, 0, "toy"), facts.value("memory.block_size")


MODEL = ToyMemory()
'''

ENGINE_ADAPTER = '''"""What the toy engine compiles to."""

from __future__ import annotations

from fp8spec.compiler.adapters.engine import EngineAdapter
from fp8spec.compiler.settings import serve_flags


class ToyAdapter(EngineAdapter):
    def build_in_verl(self, plan, valid, keys) -> None:
        prof = valid.profile("toy")
        plan.add("env", prof.value("env.fast_path"), "1", "rollout.engine", "the toy engine's fast path",
                 prof.evidence("env.fast_path"))

    def build_serve(self, plan, valid) -> list[str]:
        prof = valid.profile("toy")
        argv = prof.value("cli.serve").split() + [valid.spec.model.path]
        return argv + serve_flags(plan, prof, [("flag.tp", valid.spec.rollout.tp, "rollout.tp", "tensor parallel size")])


ADAPTER = ToyAdapter()
'''

ENGINE_RULES = '''"""The toy engine's own rule."""

from __future__ import annotations

from typing import Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule


@rule(
    "TOY001",
    "toy-serves-bf16-only",
    "error",
    "The toy engine has no FP8 linears.",
    """The toy engine exists to show the engine seam: it loads BF16 weights only, so an FP8 rollout would
    silently run in BF16 and the mismatch correction would correct nothing.""",
    "set linear.quantize: false, or roll out with another engine",
    needs_model=False,
    engine="toy",
    examples=Examples(
        bad={"rollout": {"engine": "toy"}},
        good={"rollout": {"engine": "toy"}, "linear": {"quantize": False}},
        message="cannot run FP8 linears",
    ),
)
def toy_serves_bf16_only(ctx) -> Iterator[Finding]:
    if ctx.spec.linear.quantize:
        yield Finding("the toy engine cannot run FP8 linears", "linear.quantize")
'''

PROFILE = '''kind: toy
version: "1.0.0"
source:
  package: "toy-engine==1.0.0"
  artifact: "toy_engine-1.0.0-py3-none-any.whl"
  sha256: "0000000000000000000000000000000000000000000000000000000000000000"
facts:
  cli.serve:
    value: "toy serve"
    evidence: "a test fixture"
  flag.tp:
    value: "--tp"
    evidence: "a test fixture"
  env.fast_path:
    value: "TOY_FAST_PATH"
    evidence: "a test fixture"
  package.distributions:
    value: [toy-engine]
    evidence: "a test fixture"
  memory.block_size:
    value: 16
    evidence: "a test fixture"
  memory.vocab_padding:
    value: 64
    evidence: "a test fixture"
  memory.kv_dtype_bytes:
    value: {bf16: 2, fp8_e4m3: 1, fp8_e5m2: 1}
    evidence: "a test fixture"
'''
