"""CPU benchmark: listing every linear module of the largest catalog models (target: under 250 ms each,
then a cached list).

Moved here from a wall-clock assert in tests/catalog (timing fails under load; the test now checks the
layout is built once). Best of --repeat, each on fresh facts (no cached layout).

Usage: python -m benchmarks.bench_catalog [--repeat 5] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from fp8spec.catalog._parse import facts_from_dict  # noqa: E402
from fp8spec.catalog._store import load_entry  # noqa: E402

MODELS = ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    args = parser.parse_args()
    results = []
    for mid in MODELS:
        entry = load_entry(mid)
        first, cached = [], []
        for _ in range(args.repeat):
            fresh = facts_from_dict(entry["config"], model_id=mid, source="bench", where="bench")
            t0 = time.perf_counter()
            n = len(fresh.linear_modules())
            first.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fresh.linear_modules()
            cached.append(time.perf_counter() - t0)
        row = {"model": mid, "modules": n, "first_ms": min(first) * 1e3, "cached_ms": min(cached) * 1e3}
        results.append(row)
        print(f"{mid:<28} {n:>7} modules  first {row['first_ms']:7.1f} ms  cached {row['cached_ms']:6.2f} ms")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
