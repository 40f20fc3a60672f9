"""Rollout throughput and KV capacity of several SGLang configurations, one process each (so each starts on a
clean GPU).

    python -m benchmarks.sglang.run_sglang_configs --out out/sglang qwen3-8b:bf16 qwen3-8b:fp8 \
        qwen3-30b-a3b:fp8kv qwen3-8b:fp8:dg1 qwen3-8b:bf16:triton [--args qwen3-8b='--prompts 128'] [--budget-s 3600]

Each item is MODEL:MODE[:dg0|dg1][:BACKEND] (BACKEND: flashinfer, verl's default, or triton, fa3). Logs go to
OUT/NAME.log (SGLang at log level info), records to OUT/results.jsonl (the bench record merged with the facts
parsed from the log: weights, free memory before/after the load, the KV pool, CUDA graph memory, retractions).
The driver is ``benchmarks.common.configs``, shared with ``benchmarks.engine.run_configs`` (vLLM).
"""

from __future__ import annotations

import sys

from benchmarks.common import configs
from benchmarks.common.cli import child_env
from benchmarks.common.configs import Config
from benchmarks.sglang.sglang_common import parse_log, sglang_env

BACKENDS = ("flashinfer", "triton", "fa3")


def parse_item(item: str) -> tuple[str, str, bool, str]:
    model, mode, *rest = item.split(":")
    dg, backend = False, "flashinfer"
    for word in rest:
        if word in ("dg0", "dg1"):
            dg = word == "dg1"
        elif word in BACKENDS:
            backend = word
        else:
            raise SystemExit(f"run_sglang_configs: cannot read {word!r} in {item!r}")
    return model, mode, dg, backend


def config(item: str, extra: dict[str, list[str]]) -> Config:
    model, mode, dg, backend = parse_item(item)
    argv = [sys.executable, "-m", "benchmarks.sglang.bench_sglang_rollout", "--model", model, "--mode", mode,
            "--backend", backend, "--deep-gemm", "1" if dg else "0", *extra.get(model, [])]
    return Config(f"sglang-{model}-{mode}-{'dg1' if dg else 'dg0'}-{backend}", argv, child_env(sglang_env(dg)),
                  {"engine": "sglang", "model": model, "mode": mode})


def summary(rec: dict) -> str:
    return (f"kv_tokens={rec.get('kv_cache_tokens')} weights={rec.get('weights_gib')}GiB "
            f"free_before={rec.get('free_before_load_gib')}GiB out_tok/s={rec.get('output_tok_per_s')} "
            f"gen={rec.get('generate_s')}s retracted={rec.get('retractions')} attn={rec.get('attention_backend')}")


def main() -> int:
    return configs.main(__doc__, "sglang", "MODEL:MODE[:dg0|dg1][:BACKEND]", config, parse_log, summary, 3000,
                        "run_sglang_configs")


if __name__ == "__main__":
    raise SystemExit(main())
