"""The host's cost of one table launch's table : ``gather_copy.CopyTable.rows()``.

Each launch of the table fill builds the ``[4, n]`` int64 table the kernel reads on the host before copying it to
the GPU; Qwen3-30B-A3B's sync makes 225 launches of about 84 tensors each. Median of 5,000 calls.

    python -m benchmarks.weight_sync.bench_table_rows [--tensors 84]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fp8spec.runtime.weight_sync.sender.gather_copy import CopyTable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=84)
    a = ap.parse_args()
    table, source = CopyTable(), torch.empty(16)
    for i in range(a.tensors):
        table.add(source, 1024 * i, 16 * i, 3_200_000)
    times = []
    for _ in range(5000):
        t = time.perf_counter()
        table.rows()
        times.append(time.perf_counter() - t)
    print(
        f"torch {torch.__version__}, rows() of {a.tensors} tensors: {statistics.median(times) * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
