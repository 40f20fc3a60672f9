"""vLLM engine benchmarks: rollout throughput, KV capacity, KV-scale and weight-sync probes."""
