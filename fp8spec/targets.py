"""The backends a spec compiles for: a verl trainer with a rollout engine, or an engine alone (serve)."""

TRAINERS = ("fsdp", "megatron")
ENGINES = ("vllm", "sglang")
BACKENDS = tuple(f"{t}+{e}" for t in TRAINERS for e in ENGINES) + ENGINES
