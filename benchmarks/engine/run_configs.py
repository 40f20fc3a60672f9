"""Rollout throughput and KV capacity of several vLLM configurations, one process each (so each starts on a
clean GPU).

    python -m benchmarks.engine.run_configs --out out/engine qwen3-8b:bf16 qwen3-8b:fp8:dg1 qwen3-30b-a3b:fp8kv \
        [--args qwen3-8b='--prompts 128 --output-len 1024'] [--budget-s 3600]

Each item is MODEL:MODE[:dg0|dg1] (dg1: DeepGEMM on). Logs go to OUT/NAME.log (VLLM_LOGGING_LEVEL=DEBUG, for the
memory profile), records to OUT/results.jsonl (``bench_rollout``'s record merged with the facts parsed from the
log). The driver is ``benchmarks.common.configs``, shared with ``benchmarks.sglang.run_sglang_configs``.
"""

from __future__ import annotations

import sys

from benchmarks.common import configs
from benchmarks.common.cli import child_env
from benchmarks.common.configs import Config
from benchmarks.engine.engine_common import parse_log, vllm_env


def config(item: str, extra: dict[str, list[str]]) -> Config:
    model, mode, *rest = item.split(":")
    dg = rest[0] == "dg1" if rest else False
    env = child_env(vllm_env(dg))
    env["VLLM_LOGGING_LEVEL"] = "DEBUG"
    argv = [sys.executable, "-m", "benchmarks.engine.bench_rollout", "--model", model, "--mode", mode,
            "--deep-gemm", "1" if dg else "0", *extra.get(model, [])]
    return Config(f"{model}-{mode}-{'dg1' if dg else 'dg0'}", argv, env, {"model": model, "mode": mode})


def summary(rec: dict) -> str:
    return (f"kv_tokens={rec.get('kv_cache_tokens')} avail={rec.get('available_kv_gib')}GiB "
            f"weights={rec.get('weights_gib')}GiB out_tok/s={rec.get('output_tok_per_s')} gen={rec.get('generate_s')}s "
            f"runner={rec.get('model_runner')} attn={rec.get('attention_backend')}")


def main() -> int:
    return configs.main(__doc__, "engine", "MODEL:MODE[:dg0|dg1]", config, parse_log, summary, 1500, "run_configs")


if __name__ == "__main__":
    raise SystemExit(main())
