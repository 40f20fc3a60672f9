"""SGLang engine benchmarks: the vLLM ones' counterparts on verl's SGLang rollout path."""
