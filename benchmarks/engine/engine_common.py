"""The vLLM side of the engine benchmarks: engine kwargs exactly as verl 0.9.1 builds them for an FP8 rollout,
the engine's environment, and the facts read from vLLM's log. Needs pyyaml only (no fp8spec install).
"""

from __future__ import annotations

import os

from benchmarks.common.logfacts import parse_facts
from benchmarks.common.models import MODELS, REPO, catalog_config, model_dir

__all__ = ["MODELS", "REPO", "catalog_config", "model_dir", "verl_fp8_quantization", "engine_kwargs", "vllm_env",
           "parse_log"]


def verl_fp8_quantization(num_hidden_layers: int, block=(128, 128)) -> dict:
    """verl 0.9.1's FP8 rollout: quantization='fp8' plus this hf_overrides['quantization_config']
    (verl/workers/rollout/vllm_rollout/vllm_async_server.py:1244-1257; backends/verl/0.9.1.yaml)."""
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "weight_block_size": list(block),
            "ignored_layers": [f"model.layers.{i}.mlp.gate" for i in range(num_hidden_layers)]}


def engine_kwargs(model_id: str, mode: str, util: float, max_model_len: int, **extra) -> dict:
    """vllm.LLM kwargs for mode bf16 | fp8 (W8A8 blockwise) | fp8kv (W8A8 + fp8_e4m3 KV cache)."""
    cfg = catalog_config(model_id)
    kw = {"model": model_dir(model_id), "load_format": "dummy", "skip_tokenizer_init": True, "seed": 0,
              "gpu_memory_utilization": util, "max_model_len": max_model_len, "tensor_parallel_size": 1,
              "enable_prefix_caching": False, "disable_log_stats": False}
    if mode in ("fp8", "fp8kv"):
        kw.update(quantization="fp8",
                  hf_overrides={"quantization_config": verl_fp8_quantization(cfg["num_hidden_layers"])})
    if mode in ("fp8kv", "bf16kv"):
        kw["kv_cache_dtype"] = "fp8_e4m3"
    kw.update(extra)
    return kw


def vllm_env(deep_gemm: bool) -> dict:
    """Environment of an engine process: FlashInfer's sampler off (verl's FP8 runs were measured without it, and
    the offline set does not carry FlashInfer), DeepGEMM on or off as asked."""
    env = dict(os.environ)
    env.update(VLLM_USE_FLASHINFER_SAMPLER="0", VLLM_USE_DEEP_GEMM="1" if deep_gemm else "0",
               VLLM_MOE_USE_DEEP_GEMM="1" if deep_gemm else "0", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    return env


_LOG_FACTS = {
    "kv_cache_tokens": (r"GPU KV cache size: ([\d,]+) tokens", lambda s: int(s.replace(",", ""))),
    "available_kv_gib": (r"Available KV cache memory: ([\d.]+) GiB", float),
    "weights_gib": (r"Model loading took ([\d.]+) GiB", float),
    "max_concurrency": (r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", float),
    "graph_capture_s": (r"Graph capturing finished in ([\d.]+) secs", float),
    "init_engine_s": (r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", float),
    "attention_backend": (r"Using (\w+) attention backend", str),
    "model_runner": (r"Using (V2) Model Runner", str),
    # VLLM_LOGGING_LEVEL=DEBUG: the memory profile behind the KV budget (gpu_worker.py 460-511, mem_utils.py 215)
    "non_kv_cache_gib": (r"Total non KV cache memory: ([\d.]+) ?GiB", float),
    "torch_peak_increase_gib": (r"torch peak memory increase: ([\d.]+) ?GiB", float),
    "non_torch_increase_gib": (r"non-torch forward increase memory: ([\d.]+) ?GiB", float),
    "profiled_weights_gib": (r"weights memory: ([\d.]+) ?GiB", float),
    "requested_gib": (r"Requested memory: [\d.]+ \(util\), ([\d.]+) GiB", float),
    "initial_free_gib": (r"Initial free memory: ([\d.]+) GiB", float),
}


def parse_log(text: str) -> dict:
    facts = parse_facts(text, _LOG_FACTS)
    facts.setdefault("model_runner", "V1")
    return facts
