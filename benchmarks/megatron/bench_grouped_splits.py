"""Why does the BF16 MoE config spend its time on the host? TransformerEngine's GroupedLinear alone (the experts of
one Qwen3-30B-A3B layer), forward + backward, fed per-expert token counts as Megatron's router makes them.

    python -m benchmarks.megatron.bench_grouped_splits --out DIR [--reps 5] [--iters 8]
    python -m benchmarks.megatron.bench_grouped_splits --plan      # the split sets only (no GPU, no TE)

The question (docs/results.md#trainer-layer-cost): the BF16 config runs 1.8-1.9x slower in wall clock than the same
BF16 arithmetic with the FP8 config's expert padding (every expert's token count a multiple of 16,
megatron-core's pad_routing_map), while it spends less GPU time. TE's GroupedLinear on this cuBLASLt runs one
GEMM per expert, each after a host-side algorithm query. If arbitrary token counts miss a heuristic cache that
counts in steps of 16 hit, the gap shows here, in this module alone.

What it runs. fc1 (128 GEMMs of 2048 -> 1536, gate and up) and fc2 (128 of 768 -> 2048) in BF16, a SwiGLU-sized
activation between them left out (elementwise, no GEMM). Tokens: --tokens rows routed top-8 over 128 experts
uniformly (random weights route nearly uniformly). Cases:

* ``arbitrary`` / ``pad16``: the counts as drawn, or each rounded up to a multiple of 16 (as pad_routing_map does);
* ``fresh`` / ``repeat``: a new count vector every iteration (from a pool of --pool vectors, as every micro-batch
  routes differently), or the same vector every iteration (whatever a cache keyed by shape holds, it holds).

Each process runs the four cases interleaved (rotated and reversed per repetition), --iters iterations per case
and repetition after one warm-up iteration; per iteration: host time (the calls return, no synchronisation),
GPU time (CUDA events) and wall time (after a synchronisation). Medians and min-max over all iterations.
--cutlass sets NVTE_USE_CUTLASS_GROUPED_GEMM=1 (TE's CUTLASS grouped GEMM: one kernel for all experts where TE
supports it; NVTE_CUTLASS_GROUPED_GEMM_WARN_FALLBACK=1 makes TE say when it falls back). Results:
DIR/grouped_splits[_cutlass].json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

EXPERTS, TOP_K, HIDDEN, FFN = 128, 8, 2048, 768  # Qwen3-30B-A3B (fp8spec's catalog)
PAD = 16  # megatron-core pad_routing_map's multiple for FP8 (moe_router_padding_for_quantization)


def draw_splits(tokens: int, rng: random.Random) -> list[int]:
    """Per-expert row counts of one micro-batch: each token picks TOP_K distinct experts uniformly."""
    counts = [0] * EXPERTS
    for _ in range(tokens):
        for e in rng.sample(range(EXPERTS), TOP_K):
            counts[e] += 1
    return counts


def padded(counts: list[int]) -> list[int]:
    return [-(-c // PAD) * PAD for c in counts]


def split_pool(tokens: int, pool: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [draw_splits(tokens, rng) for _ in range(pool)]


def cases(pool: list[list[int]]) -> dict[str, list[list[int]]]:
    """Case name -> the count vectors its iterations cycle through."""
    pad_pool = [padded(c) for c in pool]
    return {"arbitrary-fresh": pool, "pad16-fresh": pad_pool, "arbitrary-repeat": pool[:1], "pad16-repeat": pad_pool[:1]}


def _order(names: list[str], rep: int) -> list[str]:
    k = rep % len(names)
    order = names[k:] + names[:k]
    return order[::-1] if rep % 2 else order


def run(args) -> dict:
    import torch
    import transformer_engine.pytorch as te

    torch.manual_seed(0)
    fc1 = te.GroupedLinear(EXPERTS, HIDDEN, 2 * FFN, bias=False, params_dtype=torch.bfloat16, device="cuda")
    fc2 = te.GroupedLinear(EXPERTS, FFN, HIDDEN, bias=False, params_dtype=torch.bfloat16, device="cuda")
    pool = split_pool(args.tokens, args.pool, args.seed)
    plan = cases(pool)
    rows = max(sum(v) for vs in plan.values() for v in vs)
    x_all = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)

    def step(counts: list[int]) -> tuple[float, float, float]:
        n = sum(counts)
        x = x_all[:n].detach().requires_grad_(True)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        h = fc1(x, counts)
        y = fc2(h[:, :FFN].contiguous(), counts)
        y.float().square().mean().backward()
        end.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, start.elapsed_time(end), (t2 - t0) * 1e3

    names = list(plan)
    samples: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    cursor = dict.fromkeys(names, 0)
    for name in names:  # one warm-up iteration each
        step(plan[name][0])
    for rep in range(args.reps):
        for name in _order(names, rep):
            for _ in range(args.iters):
                vectors = plan[name]
                samples[name].append(step(vectors[cursor[name] % len(vectors)]))
                cursor[name] += 1
    out = {"cutlass": args.cutlass, "tokens": args.tokens, "pool": args.pool, "reps": args.reps, "iters": args.iters,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "cases": {}}
    for name, rows_ in samples.items():
        cols = list(zip(*rows_))
        out["cases"][name] = {
            key: {"median": statistics.median(col), "min": min(col), "max": max(col)}
            for key, col in zip(("host_ms", "gpu_ms", "wall_ms"), cols)
        }
        out["cases"][name]["rows"] = sum(plan[name][0])
    return out


def table(result: dict) -> str:
    head = f"GroupedLinear fc1+fc2 fwd+bwd, BF16, cutlass={result['cutlass']} (median, min-max; ms)"
    lines = [head, "| case | host | GPU | wall |", "|---|---|---|---|"]
    for name, c in result["cases"].items():
        cell = [f"{c[k]['median']:.2f} ({c[k]['min']:.2f}-{c[k]['max']:.2f})" for k in ("host_ms", "gpu_ms", "wall_ms")]
        lines.append(f"| {name} | {' | '.join(cell)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tokens", type=int, default=21_504, help="tokens of one micro-batch (default: a packed RL one)")
    ap.add_argument("--pool", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cutlass", action="store_true", help="NVTE_USE_CUTLASS_GROUPED_GEMM=1")
    ap.add_argument("--plan", action="store_true", help="print the split sets and stop (no GPU)")
    args = ap.parse_args(argv)
    if args.plan:
        pool = split_pool(args.tokens, min(args.pool, 4), args.seed)
        for name, vectors in cases(pool).items():
            v = vectors[0]
            print(f"{name}: {len(vectors)} vector(s); first: rows {sum(v)}, per expert {min(v)}-{max(v)}, "
                  f"multiples of {PAD}: {all(c % PAD == 0 for c in v)}")
        return 0
    if args.out is None:
        ap.error("--out is required (or --plan)")
    if args.cutlass:
        os.environ["NVTE_USE_CUTLASS_GROUPED_GEMM"] = "1"
        os.environ["NVTE_CUTLASS_GROUPED_GEMM_WARN_FALLBACK"] = "1"
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "grouped_splits_cutlass.json" if args.cutlass else "grouped_splits.json"
    (args.out / name).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
