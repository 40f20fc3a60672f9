"""Backend names, kept in one place: what a spec compiles for, and the released packages fp8spec profiles.

- ``BACKENDS``: a verl trainer with a rollout engine (``fsdp+vllm``), or an engine alone (serve).
- ``KINDS``: the packages with profiles in ``backends/<kind>/<version>.yaml`` (and schema snapshots);
  ``STACK_KINDS`` maps each to the spec's ``stack`` field that pins its version.
"""

TRAINERS = ("fsdp", "megatron")
ENGINES = ("vllm", "sglang")
BACKENDS = tuple(f"{t}+{e}" for t in TRAINERS for e in ENGINES) + ENGINES

KINDS: tuple[str, ...] = ("verl", *ENGINES, "megatron-core", "transformer-engine")
STACK_KINDS: dict[str, str] = {kind.replace("-", "_"): kind for kind in KINDS}  # stack field -> kind
