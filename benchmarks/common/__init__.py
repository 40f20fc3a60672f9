"""Helpers shared by the vLLM and SGLang benchmarks."""
