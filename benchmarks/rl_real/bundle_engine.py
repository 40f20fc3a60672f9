"""The vLLM engine, sampling and prompts of one step of a compiled bundle, as verl 0.9.1 would run them, for
the bare-engine comparison (``benchmarks.engine.bench_rollout --bundle``).

Nothing is retyped from the spec: the bundle's overrides.yaml (plus run_overrides.txt, which the run
appends) is composed in verl's own Hydra config tree, and the engine arguments are built from that config the
way verl's vLLM server builds them (verl/workers/rollout/vllm_rollout/vllm_async_server.py, cited per key
below; tests/rl_real/test_bundle_engine.py checks the key list against that file's source). Prompts are the
step's parquet rows rendered by verl's own agent-loop token builder, each repeated rollout.n times as verl's
trainer repeats them (ray_trainer.py: batch.repeat(interleave=True)).

Not reproduced: verl's FP8 load patches (apply_vllm_quant_patches: how synced BF16 weights are quantized on
load; the engine's forward kernels are vLLM's either way), its logits mask past len(tokenizer) (a no-op here:
the tokenizer is the model's full vocabulary), and the async HTTP server around the engine (the point of the
comparison).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUN_OVERRIDES = HERE / "run_overrides.txt"
EXTENSION = "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"  # vllm_async_server.py 1270


SYNC_RUN_OVERRIDES = HERE / "sync_run_overrides.txt"


def run_overrides(path: Path = RUN_OVERRIDES) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def compose(bundle: Path, extra: list[str] = []):  # noqa: B006 - read only
    """verl's ppo_trainer config with the bundle's overrides, run_overrides.txt and ``extra`` (run_h200_real.sh's
    RL_SYNC_RUN=1 adds sync_run_overrides.txt), as main_ppo composes it."""
    import yaml
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    overrides = list(yaml.safe_load((bundle / "overrides.yaml").read_text(encoding="utf-8"))) + run_overrides()
    overrides += list(extra)
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl is not importable"
    config_dir = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def rollout_config(cfg: Any) -> Any:
    """verl's RolloutConfig dataclass of the composed tree: what the server reads (_init_config 1094-1096),
    defaults of fields the YAML tree lacks (enable_sleep_mode, ...) included."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)


def fp8_quantization_config(num_hidden_layers: int) -> dict:
    """vllm_async_server.py 1240-1252 (_apply_quantization, quantization == 'fp8')."""
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
            "ignored_layers": [f"model.layers.{i}.mlp.gate" for i in range(num_hidden_layers)]}


def engine_kwargs(cfg: Any, replica_rank: int = 0) -> dict:
    """vllm.LLM keyword arguments equal to the `vllm serve` arguments verl's server passes (args dict, 324-346)."""
    r = rollout_config(cfg)
    model_path = cfg.actor_rollout_ref.model.path
    hf = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    max_model_len = r.max_model_len or hf["max_position_embeddings"]  # _validate_configs 1104-1105
    max_batched = r.max_num_batched_tokens
    if not r.enable_chunked_prefill and max_batched < max_model_len:  # 1113-1119
        max_batched = max_model_len
    extra = {k: v for k, v in dict(r.engine_kwargs.get("vllm") or {}).items() if v is not None}  # 287-288
    compilation = dict(extra.pop("compilation_config", None) or {})  # 306-309
    compilation.setdefault("cudagraph_mode", "FULL_AND_PIECEWISE")
    if r.cudagraph_capture_sizes:  # 320-321
        compilation["cudagraph_capture_sizes"] = list(r.cudagraph_capture_sizes)
    hf_overrides: dict = {}
    if r.quantization == "fp8":
        hf_overrides["quantization_config"] = fp8_quantization_config(hf["num_hidden_layers"])
    elif r.quantization is not None:
        raise ValueError(f"bundle_engine: quantization {r.quantization!r} is not one the real-size runs use")
    return {
        "model": model_path, "dtype": r.dtype, "load_format": r.load_format, "skip_tokenizer_init": False,
        "distributed_executor_backend": "mp", "worker_extension_cls": EXTENSION,
        "trust_remote_code": cfg.actor_rollout_ref.model.trust_remote_code, "max_model_len": max_model_len,
        "max_num_seqs": r.max_num_seqs, "enable_chunked_prefill": r.enable_chunked_prefill,
        "max_num_batched_tokens": max_batched, "enable_prefix_caching": r.enable_prefix_caching,
        "enable_sleep_mode": r.enable_sleep_mode, "logprobs_mode": r.logprobs_mode,
        "enforce_eager": r.enforce_eager, "gpu_memory_utilization": r.gpu_memory_utilization,
        "disable_log_stats": r.disable_log_stats, "tensor_parallel_size": r.tensor_model_parallel_size,
        "seed": replica_rank + r.seed,
        # _get_override_generation_config 1197-1207
        "override_generation_config": {"temperature": r.temperature, "top_k": r.top_k, "top_p": r.top_p,
                                       "repetition_penalty": 1.0, "max_new_tokens": r.response_length},
        "quantization": r.quantization, "hf_overrides": hf_overrides, "scheduling_policy": r.scheduling_policy,
        "compilation_config": compilation, **extra,
    }


def sampling_kwargs(cfg: Any, prompt_len: int, max_model_len: int) -> dict:
    """SamplingParams of one training request: the agent loop's dict (agent_loop.py 590-596) completed by the
    server's generate() (vllm_async_server.py 593-634)."""
    r = rollout_config(cfg)
    max_tokens = min(r.response_length, r.prompt_length + r.response_length - prompt_len)
    max_tokens = max(1, min(max_tokens, max_model_len - prompt_len))
    return {"max_tokens": max_tokens, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
            "repetition_penalty": 1.0, "logprobs": 0 if r.calculate_log_probs else None,
            "ignore_eos": bool(r.get("ignore_eos", False))}


def replicas(cfg: Any) -> int:
    return cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node // cfg.actor_rollout_ref.rollout.tensor_model_parallel_size


def step_prompts(cfg: Any, step: int) -> list[list[int]]:
    """Token ids of step `step`'s requests, in the trainer's order: each row rendered by verl's token builder
    and repeated rollout.n times (needs data.shuffle false: run_overrides.txt)."""
    import pandas as pd
    from transformers import AutoConfig, AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    if cfg.data.shuffle:
        raise ValueError("bundle_engine: data.shuffle is on, a step's rows are not known in advance")
    path = cfg.actor_rollout_ref.model.path
    tokenizer = AutoTokenizer.from_pretrained(path)
    builder = create_continuous_token_builder(tokenizer, hf_model_type=AutoConfig.from_pretrained(path).model_type)
    files = cfg.data.train_files
    rows = pd.concat([pd.read_parquet(f) for f in ([files] if isinstance(files, str) else list(files))])
    batch = cfg.data.train_batch_size
    chosen = rows.iloc[(step - 1) * batch: step * batch]
    if len(chosen) < batch:
        raise ValueError(f"bundle_engine: {len(rows)} rows hold no full step {step} of {batch}")
    n = cfg.actor_rollout_ref.rollout.n
    return [ids for prompt in chosen[cfg.data.prompt_key] for ids in [builder.build_initial_tokens(list(prompt))] * n]
