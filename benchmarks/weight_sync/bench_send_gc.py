"""Python's garbage collections during the trainer's send loop, on the CPU.

The sender's per-tensor loop (``bench_send_loop.send_loop``, its sender row: table, BF16 cast, packed metadata, the two
halves; the table's launches are no-ops here) over Qwen3-30B-A3B's 18,867 tensors, in a process whose long-lived
heap is grown to ``--heaps`` objects (a trainer or engine driver holds millions), with collections on and off.
Per setting: the loop's median and largest time over ``--reps`` syncs, the time ``gc.callbacks`` saw in
collections, and how many were full (generation 2) collections.

    python -m benchmarks.weight_sync.bench_send_gc [--tensors 18867] [--reps 7] [--heaps 0,1000000,3000000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch

from benchmarks.weight_sync.bench_send_loop import send_loop
from fp8spec.runtime.weight_sync.sender import fused_send
from fp8spec.runtime.weight_sync.sender.fused_send import BucketFill


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=18867)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--heaps", default="0,1000000,3000000")
    a = ap.parse_args()
    fused_send.gather_copy.launch = lambda buffer, table: table.clear()  # the copies are the GPU's
    buf = torch.empty(1 << 30, dtype=torch.uint8)
    fill = BucketFill(buf, buf.numel() // 64, table=True, cast=torch.bfloat16, packed=True)

    seen = {"s": 0.0, "full": 0, "at": 0.0}

    def timer(phase: str, info: dict) -> None:
        if phase == "start":
            seen["at"] = time.perf_counter()
        else:
            seen["s"] += time.perf_counter() - seen["at"]
            seen["full"] += info["generation"] == 2

    gc.callbacks.append(timer)
    heap: list = []
    print(f"torch {torch.__version__}, {a.tensors} tensors, {a.reps} syncs per row, ms:")
    for size in (int(h) for h in a.heaps.split(",")):
        heap.extend({"a": [i], "b": (i, str(i))} for i in range(len(heap), size))  # long-lived containers
        gc.collect()
        for collect in (True, False):
            loops, gcs, fulls = [], [], 0
            for _ in range(a.reps):
                weights = [
                    (
                        f"model.layers.{i // 393}.mlp.experts.{i % 128}.gate_proj.weight",
                        torch.empty(8, 16, dtype=torch.bfloat16),
                    )
                    for i in range(a.tensors)
                ]
                seen.update(s=0.0, full=0)
                if not collect:
                    gc.disable()
                t = time.perf_counter()
                send_loop(fill, weights)
                loops.append((time.perf_counter() - t) * 1e3)
                gc.enable()
                gcs.append(seen["s"] * 1e3)
                fulls += seen["full"]
                del weights
            print(
                f"  heap {size:>9,} objects, collections {'on ' if collect else 'off'}: loop median "
                f"{statistics.median(loops):6.1f} (largest {max(loops):6.1f}), in collections median "
                f"{statistics.median(gcs):5.1f} (largest {max(gcs):6.1f}), full collections {fulls}"
            )


if __name__ == "__main__":
    main()
