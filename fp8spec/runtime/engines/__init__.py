"""Engine-side pieces of the runtime patches (vLLM worker, SGLang custom loader, vLLM plugin)."""
