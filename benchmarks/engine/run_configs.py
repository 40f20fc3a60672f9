"""Run several engine configurations one after another (one process each, so each starts on a clean GPU).

    python benchmarks/engine/run_configs.py --out DIR --budget-s 540 \
        qwen3-8b:bf16 qwen3-8b:fp8:dg1 qwen3-30b-a3b:fp8kv ...  [-- extra bench_rollout.py args per model]

Each item is MODEL:MODE[:dg0|dg1]. Logs go to DIR/NAME.log (VLLM_LOGGING_LEVEL=DEBUG, for the memory
profile), records to DIR/results.jsonl (the bench record merged with the facts parsed from the log). Stops
starting new configurations when less than the slowest one so far is left of --budget-s, and says so.
Per-model workload overrides: --args MODEL='--prompts 128 --output-len 1024'.
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
from engine_common import offline_env, parse_log  # noqa: E402


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
    rows = []
    for item in a.items:
        model, mode, *rest = item.split(":")
        dg = rest[0] == "dg1" if rest else False
        name = f"{model}-{mode}-{'dg1' if dg else 'dg0'}"
        left = a.budget_s - (time.perf_counter() - t_start)
        if left < max(slowest * 1.1, 60):
            print(f"run_configs: {left:.0f} s left of the budget, {name} and later not run", flush=True)
            break
        env = offline_env(dg)
        env["VLLM_LOGGING_LEVEL"] = "DEBUG"
        rec_path = a.out / f"{name}.json"
        cmd = [sys.executable, str(HERE / "bench_rollout.py"), "--model", model, "--mode", mode,
               "--deep-gemm", "1" if dg else "0", "--json", str(rec_path), *extra.get(model, [])]
        t0 = time.perf_counter()
        with open(a.out / f"{name}.log", "w", encoding="utf-8") as log:
            try:
                proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=max(left - 5, 30))
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        took = time.perf_counter() - t0
        slowest = max(slowest, took)
        text = (a.out / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else {"model": model, "mode": mode}
        rec.update(parse_log(text), name=name, rc=rc, wall_s=round(took, 1))
        if rc != 0:
            rec["error_tail"] = text[-1500:]
        rows.append(rec)
        with open(a.out / "results.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"{name}: rc={rc} {took:.0f}s kv_tokens={rec.get('kv_cache_tokens')} "
              f"avail={rec.get('available_kv_gib')}GiB weights={rec.get('weights_gib')}GiB "
              f"out_tok/s={rec.get('output_tok_per_s')} gen={rec.get('generate_s')}s "
              f"runner={rec.get('model_runner')} attn={rec.get('attention_backend')}", flush=True)
        if rc != 0:
            print(text[-1200:], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
