"""fp8spec's SGLang memory model (fp8spec/engines/sglang/memory.py) against what SGLang 0.5.12 reported at start.

    python -m benchmarks.sglang.plan_vs_engine out/sglang/results.jsonl [more results.jsonl | .tgz ...] [--json out.json]

For each engine record of ``run_sglang_configs`` (model, mode, mem_fraction_static, and the facts parsed from
SGLang's log), the planner computes the same configuration (``plan_choice`` with an ``EngineSetup`` for SGLang
0.5.12, the record's fraction and the measured total memory when given) and the two are printed side by side:
free memory before the weights (planner: total minus its CUDA-context estimate; SGLang: "Load weight begin. avail
mem"), weights (planner: parameter bytes plus the FP8 dummy-init cache; SGLang: "Load weight end ... mem usage",
the free-memory drop across the load), KV pool bytes and tokens (SGLang: max_total_num_tokens and "KV Cache is
allocated" K + V sizes). The aim: the planner within 5 % of SGLang's KV capacity.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common.records import read_records

GIB = 1 << 30
MODES = {"bf16": ("bf16", False), "fp8": ("bf16", True), "fp8kv": ("fp8_e4m3", True)}


def records(paths: list[str]) -> list[dict]:
    """The SGLang engines that started and generated."""
    return [r for r in read_records(paths) if r.get("rc") == 0 and r.get("engine") == "sglang"]


def planned(r: dict, total_bytes: int | None):
    from fp8spec.catalog import get_model
    from fp8spec.plan.facts import gpu_memory
    from fp8spec.plan.rollout import Choice, plan_choice
    from fp8spec.plan.setup import EngineSetup

    model = get_model(r["model"])
    kv_dtype, fp8 = MODES[r["mode"]]
    quantized = tuple(m.name for m in model.linear_modules() if m.kind not in ("lm_head", "router")) if fp8 else None
    mem = gpu_memory("h200")
    setup = EngineSetup(engine="sglang", engine_version="0.5.12", gpu="h200", total_bytes=total_bytes or mem.total_bytes,
                        sms=mem.sms, utilization=r["util"], tp=1, ep=1, max_num_batched_tokens=16384,
                        max_num_seqs=256, max_model_len=r["max_model_len"], cuda_graphs=True, kv_dtype=kv_dtype,
                        defaults="benchmarks/sglang/plan_vs_engine.py")
    return plan_choice(model, setup, Choice(r["mode"], r["mode"], quantized, kv_dtype), seq_len=r["max_model_len"],
                       sequences=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="results.jsonl files or .tgz archives holding them")
    ap.add_argument("--total-bytes", type=int, help="torch.cuda.mem_get_info()[1] on the measuring machine")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    print("| model | mode | free before load GiB (plan / SGLang) | weights + dummy-init cache GiB (plan / SGLang) | "
          "KV tokens (plan / SGLang) | error |")
    print("|---|---|---|---|---|---:|")
    for r in records(a.inputs):
        p = planned(r, a.total_bytes)
        free_plan = p.memory.detail.get("free_before_load", 0) / GIB
        loaded_plan = (p.weights.total + p.memory.load_cache) / GIB  # SGLang's "mem usage" of the load
        tokens_plan, tokens = p.kv.num_blocks, r.get("max_total_num_tokens") or r.get("kv_cache_tokens")
        err = (tokens_plan - tokens) / tokens if tokens else None
        row = {"model": r["model"], "mode": r["mode"], "util": r["util"], "free_before_plan_gib": round(free_plan, 2),
               "free_before_sglang_gib": r.get("free_before_load_gib"), "weights_plan_gib": round(loaded_plan, 2),
               "weights_sglang_gib": r.get("weights_gib"), "kv_tokens_plan": tokens_plan, "kv_tokens_sglang": tokens,
               "kv_tokens_error": err}
        rows.append(row)
        print(f"| {r['model'].split('/')[-1]} | {r['mode']} | {free_plan:.2f} / {r.get('free_before_load_gib')} | "
              f"{loaded_plan:.2f} / {r.get('weights_gib')} | {tokens_plan:,} / {tokens} | "
              f"{'' if err is None else f'{err:+.2%}'} |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
