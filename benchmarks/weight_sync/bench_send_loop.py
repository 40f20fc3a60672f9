"""The trainer side's per-tensor cost on the CPU (BENCHMARKS.md 8.6): the fused fill's loop against its floor.

For Qwen3-30B-A3B's 18,867 checkpoint tensors (tiny stand-ins: the loop's per-tensor work, not the copies), per
tensor: ``fused_send.BucketFill``'s fits + add + flush (what the sender does today), the reshape + byte view it
needs per source, and the floor a sender that replays a cached layout would pay (compare each tensor's name,
shape, dtype and device with the previous sync's, keep the tensor). Medians of ``--reps`` passes.

    python benchmarks/weight_sync/bench_send_loop.py [--tensors 18867] [--reps 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fp8spec.runtime.fused_send import BucketFill


def per_tensor_us(fn, n: int, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=18867)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    weights = [
        (
            f"model.layers.{i // 393}.mlp.experts.{i % 128}.gate_proj.weight",
            torch.empty(8, 16, dtype=torch.bfloat16),
        )
        for i in range(a.tensors)
    ]
    buf = torch.empty(1 << 30, dtype=torch.uint8)
    fill = BucketFill(buf, buf.numel())

    def fused_loop():
        fill.reset()
        for name, w in weights:
            if not fill.fits(w):
                fill.flush()
                fill.reset()
            fill.add(name, w)
        fill.flush()

    def byte_views():
        for _, w in weights:
            w.reshape(-1).view(torch.uint8)

    keys = [(n, w.shape, w.dtype, w.get_device()) for n, w in weights]

    def replay_floor():
        kept = []
        for i, (name, w) in enumerate(weights):
            if (name, w.shape, w.dtype, w.get_device()) != keys[i]:
                raise AssertionError(name)
            kept.append(w)

    print(f"torch {torch.__version__}, {a.tensors} tensors, median of {a.reps} passes, us per tensor:")
    for label, fn in (
        ("fused fill: fits + add + flush", fused_loop),
        ("  of which the reshape + byte view per source", byte_views),
        ("replay floor: key check + keep", replay_floor),
    ):
        print(f"  {label:48s} {per_tensor_us(fn, a.tensors, a.reps):6.2f}")


if __name__ == "__main__":
    main()
