"""Shared pieces of the SGLang 0.5.12 runs on the H200: engine kwargs exactly as verl 0.9.1 builds them for an
SGLang rollout, the environment, and the facts parsed from SGLang's log. Model folders come from
``benchmarks/common/models.py`` (config.json from the fp8spec catalog; ``load_format="dummy"``).

Every SGLang/verl name used here was read from the wheels (paths inside them):

* verl's arguments: ``verl/workers/rollout/sglang_rollout/async_sglang_server.py:314-341`` (model_path, dtype,
  mem_fraction_static = rollout.gpu_memory_utilization, disable_cuda_graph = enforce_eager, enable_memory_saver
  True, tp/dp/ep, load_format, max_running_requests = rollout.max_num_seqs (rollout.yaml:84, 256),
  attention_backend flashinfer for sglang >= 0.5.12 (:289-297), skip_tokenizer_init (rollout.yaml:333, True),
  skip_server_warmup, quantization, json_model_override_args = {"quantization_config": ...}, then
  engine_kwargs.sglang splatted last: fp8spec puts kv_cache_dtype there), enable_weights_cpu_backup True in
  HYBRID/COLOCATED mode (:380-387). log_level: verl passes "error"; the benches pass "info" to read the log.
* verl's FP8 quantization config: ``verl/utils/sglang/sglang_fp8_utils.py:99-115`` (dynamic, e4m3, fp8,
  weight_block_size [128, 128], ignored_layers from SGLANG_FP8_IGNORED_LAYERS when set).
* ServerArgs fields: ``sglang/srt/server_args.py`` 368 model_path, 374 skip_tokenizer_init, 375 load_format,
  378 context_length, 405 dtype, 406 quantization, 408 kv_cache_dtype, 418 mem_fraction_static, 419
  max_running_requests, 448 tp_size, 457 random_seed, 472 log_level, 539 json_model_override_args, 561
  attention_backend, 706 disable_radix_cache, 707 cuda_graph_max_bs, 709 disable_cuda_graph, 752
  enable_memory_saver, 753 enable_weights_cpu_backup, 815 custom_weight_loader.
"""

from __future__ import annotations

import json
import os
import re

from benchmarks.common.logfacts import parse_facts
from benchmarks.common.models import MODELS, catalog_config, model_dir

__all__ = ["MODELS", "catalog_config", "model_dir", "verl_sglang_fp8_config", "engine_kwargs", "sglang_env",
           "parse_log"]


def verl_sglang_fp8_config(ignored_layers: list[str] | None = None) -> dict:
    """verl 0.9.1's build_sglang_fp8_quant_config for a BF16 checkpoint (no quantization_config of its own)."""
    cfg = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
    if ignored_layers:
        cfg["ignored_layers"] = list(ignored_layers)
    return cfg


def engine_kwargs(model_path: str, mode: str, util: float, max_model_len: int | None = None,
                  backend: str = "flashinfer", **extra) -> dict:
    """sglang.Engine kwargs for mode bf16 | fp8 (W8A8 blockwise) | fp8kv (W8A8 + fp8_e4m3 KV cache), the way verl
    launches its SGLang server (dummy weights, HYBRID mode). ``max_model_len`` becomes context_length (verl leaves
    SGLang's context_length unset: the model's own; the benches pass the vLLM table's 4096 only if asked)."""
    kw = {"model_path": model_path, "dtype": "bfloat16", "mem_fraction_static": util, "disable_cuda_graph": False,
              "enable_memory_saver": True, "tp_size": 1, "load_format": "dummy", "max_running_requests": 256,
              "attention_backend": backend, "skip_tokenizer_init": True, "skip_server_warmup": True,
              "enable_weights_cpu_backup": True, "random_seed": 0, "log_level": "info"}
    if max_model_len:
        kw["context_length"] = max_model_len
    if mode in ("fp8", "fp8kv"):
        kw.update(quantization="fp8", json_model_override_args=json.dumps({"quantization_config":
                                                                           verl_sglang_fp8_config()}))
    if mode in ("fp8kv", "bf16kv"):
        kw["kv_cache_dtype"] = "fp8_e4m3"  # fp8spec's engine_kwargs.sglang.kv_cache_dtype (plain "fp8" is refused)
    kw.update(extra)
    return kw


def sglang_env(deep_gemm: bool) -> dict:
    """Environment of an SGLang engine process. DeepGEMM off unless asked: with sgl-deep-gemm installed SGLang
    turns it on (deep_gemm_wrapper/configurer.py:17-32) and precompiles every M at start ("typically 10-20 mins",
    compile_utils.py:128-143); off, FP8 block GEMMs take sgl_kernel's CUTLASS path (fp8_utils.py:437-449)."""
    env = dict(os.environ)
    env.update(SGLANG_ENABLE_JIT_DEEPGEMM="1" if deep_gemm else "0", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")
    return env


def _gib(s: str) -> float:
    return float(s)


_LOG_FACTS = {
    # model_runner.py:1299-1324 (free memory after torch distributed init, before the weights)
    "init_dist_mem_gib": (r"Init torch distributed ends\. elapsed=[\d.]+ s, mem usage=([\d.]+) GB", _gib),
    # model_runner.py:1375 / 1554-1560
    "free_before_load_gib": (r"Load weight begin\. avail mem=([\d.]+) GB", _gib),
    "free_after_load_gib": (r"Load weight end\..*?avail mem=([\d.]+) GB", _gib),
    "weights_gib": (r"Load weight end\..*?mem usage=([\d.]+) GB", _gib),
    # memory_pool.py:743-750
    "kv_pool_tokens": (r"KV Cache is allocated\. #tokens: (\d+)", int),
    "k_size_gib": (r"KV Cache is allocated\. #tokens: \d+, K size: ([\d.]+) GB", _gib),
    "v_size_gib": (r"KV Cache is allocated\. #tokens: \d+, K size: [\d.]+ GB, V size: ([\d.]+) GB", _gib),
    # model_runner_kv_cache_mixin.py:909
    "free_after_pool_gib": (r"Memory pool end\. avail mem=([\d.]+) GB", _gib),
    # scheduler.py:776-782
    "max_total_num_tokens": (r"max_total_num_tokens=(\d+)", int),
    "max_running_requests": (r"max_total_num_tokens=\d+, chunked_prefill_size=-?\d+, max_prefill_tokens=\d+, "
                             r"max_running_requests=(\d+)", int),
    "context_len": (r"max_running_requests=\d+, context_len=(\d+)", int),
    # model_runner.py:2944-2965
    "graph_capture_s": (r"Capture cuda graph end\. Time elapsed: ([\d.]+) s", float),
    "graph_mem_gib": (r"Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=([\d.]+) GB", _gib),
    # server_args printed at start (engine.py:220)
    "attention_backend": (r"attention_backend='(\w+)'", str),
    "sampling_backend": (r"sampling_backend='(\w+)'", str),
    "mem_fraction_static": (r"mem_fraction_static=([\d.]+)", float),
}


def parse_log(text: str) -> dict:
    facts = parse_facts(text, _LOG_FACTS)
    # scheduler.py:2954-2967: "KV cache pool is full. Retract requests. #retracted_reqs: N, ..."
    retracted = [int(n) for n in re.findall(r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)", text)]
    facts["retractions"] = sum(retracted)
    facts["retraction_events"] = len(retracted)
    facts["deep_gemm_precompile"] = "Entering DeepGEMM JIT Pre-Compile session" in text
    return facts
