"""Run several SGLang engine configurations one after another (one process each, so each starts on a clean GPU).

    python benchmarks/sglang/run_sglang_configs.py --out DIR --budget-s 540 \
        qwen3-8b:bf16 qwen3-8b:fp8 qwen3-30b-a3b:fp8kv qwen3-8b:fp8:dg1 qwen3-8b:bf16:triton ...  \
        [--args MODEL='--prompts 128 --output-len 1024']

Each item is MODEL:MODE[:dg0|dg1][:BACKEND] (BACKEND: flashinfer, verl's default, or triton, fa3). Logs go to
DIR/NAME.log (SGLang at log level info), records to DIR/results.jsonl (the bench record merged with the facts
parsed from the log: weights, free memory before/after the load, the KV pool, CUDA graph memory, retractions).
Stops starting new configurations when less than the slowest one so far is left of --budget-s, and says so.
The same driver shape as benchmarks/engine/run_configs.py (vLLM).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from sglang_common import parse_log, sglang_env  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--args", action="append", default=[], help="MODEL='extra args'")
    ap.add_argument("items", nargs="+")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    extra = {}
    for item in a.args:
        model, _, text = item.partition("=")
        extra[model] = shlex.split(text)
    t_start = time.perf_counter()
    slowest = 0.0
    for item in a.items:
        model, mode, dg, backend = parse_item(item)
        name = f"sglang-{model}-{mode}-{'dg1' if dg else 'dg0'}-{backend}"
        left = a.budget_s - (time.perf_counter() - t_start)
        if left < max(slowest * 1.1, 60):
            print(f"run_sglang_configs: {left:.0f} s left of the budget, {name} and later not run", flush=True)
            break
        rec_path = a.out / f"{name}.json"
        cmd = [sys.executable, str(HERE / "bench_sglang_rollout.py"), "--model", model, "--mode", mode,
               "--backend", backend, "--deep-gemm", "1" if dg else "0", "--json", str(rec_path),
               *extra.get(model, [])]
        t0 = time.perf_counter()
        with open(a.out / f"{name}.log", "w", encoding="utf-8") as log:
            try:
                proc = subprocess.run(cmd, env=sglang_env(dg), stdout=log, stderr=subprocess.STDOUT,
                                      timeout=max(left - 5, 30))
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        took = time.perf_counter() - t0
        slowest = max(slowest, took)
        text = (a.out / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else {"engine": "sglang", "model": model,
                                                                           "mode": mode}
        rec.update(parse_log(text), name=name, rc=rc, wall_s=round(took, 1))
        if rc != 0:
            rec["error_tail"] = text[-3000:]
        with open(a.out / "results.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"{name}: rc={rc} {took:.0f}s kv_tokens={rec.get('kv_cache_tokens')} "
              f"weights={rec.get('weights_gib')}GiB free_before={rec.get('free_before_load_gib')}GiB "
              f"out_tok/s={rec.get('output_tok_per_s')} gen={rec.get('generate_s')}s "
              f"retracted={rec.get('retractions')} attn={rec.get('attention_backend')}", flush=True)
        if rc != 0:
            print(text[-2000:], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
