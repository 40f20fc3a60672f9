"""Rollout throughput of one real SGLang 0.5.12 engine configuration (one process per configuration).

    python -m benchmarks.sglang.bench_sglang_rollout --model qwen3-8b --mode fp8 --util 0.6 --max-model-len 4096 \
        --prompts 256 --prompt-len 1024 --output-len 1536 --json out/sglang/8b.json [--backend flashinfer]

The workload of ``benchmarks.engine.bench_rollout`` (``benchmarks.common.workload``; docs/results.md): ``--prompts``
random-token prompts submitted at once, temperature 1, ``ignore_eos`` so every sequence makes exactly
``--output-len`` tokens, a 16-prompt warm-up first; weights are SGLang's dummy init at the model's real shapes.
The engine is built the way verl 0.9.1 launches its SGLang rollout (``sglang_common.engine_kwargs``). Modes:
bf16, fp8 (W8A8 blockwise 128x128 through verl's quantization_config), fp8kv (fp8 + fp8_e4m3 KV cache).
Writes one JSON record (throughput, SGLang's KV capacity ``max_total_num_tokens`` from the scheduler's init info,
the run's retractions) to ``--json``; SGLang's log goes to stderr (the driver parses it).

SGLang API used (sglang 0.5.12 wheel): ``sglang.Engine(**ServerArgs fields)`` (srt/entrypoints/engine.py:199-220),
``Engine.generate(input_ids=..., sampling_params=...)`` (:314-353; one dict per prompt with ``output_ids`` and
``meta_info``), ``Engine.get_server_info()`` (:968-977: the scheduler's init info holds max_total_num_tokens,
managers/scheduler.py:1504-1512), ``Engine.shutdown()`` (:887). Sampling parameter names: temperature, top_p,
max_new_tokens, ignore_eos (srt/sampling/sampling_params.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common import workload
from benchmarks.sglang.sglang_common import MODELS, engine_kwargs, model_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    workload.add_arguments(ap, required=True)
    ap.add_argument("--backend", default="flashinfer", help="attention_backend (verl's default: flashinfer)")
    ap.add_argument("--max-running-requests", type=int, default=256,
                    help="SGLang max_running_requests (verl passes rollout.max_num_seqs, default 256)")
    ap.add_argument("--json", type=Path, default=Path("out/sglang/bench_sglang_rollout.json"),
                    help="where the record goes (default: %(default)s)")
    args = ap.parse_args()
    args.json.parent.mkdir(parents=True, exist_ok=True)

    import sglang

    model_id = MODELS[args.model]
    kw = engine_kwargs(model_dir(model_id), args.mode, args.util, args.max_model_len, backend=args.backend,
                       max_running_requests=args.max_running_requests)
    t0 = time.perf_counter()
    llm = sglang.Engine(**kw)
    start_s = time.perf_counter() - t0
    info = llm.get_server_info()

    prompts = workload.random_prompts(args.prompts, args.prompt_len)
    params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": args.output_len, "ignore_eos": True}
    warm = {"temperature": 1.0, "max_new_tokens": 32, "ignore_eos": True}
    llm.generate(input_ids=prompts[:workload.WARMUP_PROMPTS], sampling_params=warm)

    t1 = time.perf_counter()
    outs = llm.generate(input_ids=prompts, sampling_params=params)
    gen_s = time.perf_counter() - t1
    out_tokens = sum(len(o["output_ids"]) for o in outs)
    record = {
        "engine": "sglang", "sglang_version": sglang.__version__, "model": model_id, "mode": args.mode,
        "attention_backend": info.get("attention_backend"), "sampling_backend": info.get("sampling_backend"),
        "deep_gemm": bool(args.deep_gemm), "util": args.util, "max_model_len": args.max_model_len,
        "prompts": args.prompts, "prompt_len": args.prompt_len, "output_len": args.output_len,
        "engine_start_s": round(start_s, 1), "generate_s": round(gen_s, 2),
        **workload.throughput(args, out_tokens, gen_s),
        "kv_cache_tokens": info.get("max_total_num_tokens"), "max_running_requests": info.get("max_running_requests"),
        "sglang_enable_jit_deepgemm": os.environ.get("SGLANG_ENABLE_JIT_DEEPGEMM"),
        "engine_kwargs": {k: v for k, v in kw.items() if k != "model_path"},
    }
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
    print(json.dumps(record), file=sys.stderr)
    llm.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
