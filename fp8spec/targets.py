"""Backend names, derived in one place: what a spec compiles for, and the released packages fp8spec profiles.

- ``TRAINERS``: verl's trainers, one folder each under fp8spec/trainers/.
- ``ENGINES``: the rollout engines, one folder each under fp8spec/engines/ (the registry's names).
- ``BACKENDS``: a verl trainer with a rollout engine (``fsdp+vllm``), or an engine alone (serve).
- ``KINDS``: the packages with profiles in ``backends/<kind>/<version>.yaml`` (and schema snapshots), in the order
  of backends/stack.yaml; ``STACK_KINDS`` maps the spec's ``stack`` field that pins each to its kind.
"""

from fp8spec.engines import engine_names
from fp8spec.stack import default_stack, kind_of
from fp8spec.trainers import trainer_names

TRAINERS = trainer_names()
ENGINES = engine_names()
BACKENDS = tuple(f"{t}+{e}" for t in TRAINERS for e in ENGINES) + ENGINES

STACK_KINDS: dict[str, str] = {field: kind_of(field) for field in default_stack()}  # stack field -> kind
KINDS: tuple[str, ...] = tuple(STACK_KINDS.values())
