"""The trainer side's per-tensor cost on the CPU: the fused fill's loop against its floor (docs/results.md).

For Qwen3-30B-A3B's 18,867 checkpoint tensors (tiny stand-ins: the loop's per-tensor work, not the copies), per
tensor: ``fused_send.BucketFill``'s fits + add + flush with no table, cast or packed metadata; the
same loop as the patched sender runs it with the runtime's defaults (the table fill, the BF16 cast, the packed
metadata, the two halves; the table's launches are no-ops here, they copy on a GPU); the reshape + byte view
a gathered run needs per source; and the floor a sender that replays a cached layout would pay (compare each
tensor's name, shape, dtype and device with the previous sync's, keep the tensor). Medians of ``--reps`` passes.
The sender's row calls ``sent`` / ``room`` / ``add(..., dtype)`` where ``BucketFill`` has them and the
older ``nbytes`` / ``fits`` / ``add`` otherwise, so the same script measures the commits before.

    python -m benchmarks.weight_sync.bench_send_loop [--tensors 18867] [--reps 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fp8spec.runtime.weight_sync.sender import fused_send
from fp8spec.runtime.weight_sync.sender.fused_send import BucketFill, Regions


def per_tensor_us(fn, n: int, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(times)


def send_loop(fill: BucketFill, weights: list) -> None:
    """``async_send_weights``' per-tensor steps over ``weights``, the bucket's send left out (bench_send_gc.py
    runs it too)."""
    regions = Regions(fill.bucket_size, True)
    fill.reset(*regions.bounds())
    for name, w in weights:
        if hasattr(fill, "room"):
            dtype, nbytes = fill.sent(name, w)
            regions.needs_whole(nbytes)
            if not fill.room(dtype, nbytes) and fill.meta:
                fill.flush()
                regions.after_send()
                fill.reset(*regions.bounds())
            fill.add(name, w, dtype)
        else:
            regions.needs_whole(fill.nbytes(name, w))
            if not fill.fits(w, name) and fill.meta:
                fill.flush()
                regions.after_send()
                fill.reset(*regions.bounds())
            fill.fits(w, name)
            fill.add(name, w)
    fill.flush()


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

    sender_fill = BucketFill(buf, buf.numel() // 64, table=True, cast=torch.bfloat16, packed=True)
    # the copies are the GPU's, not measured here
    fused_send.gather_copy.launch = lambda buffer, table: table.clear()

    def sender_loop():
        send_loop(sender_fill, weights)

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
        ("the sender's loop: table, cast, packed, halves", sender_loop),
        ("replay floor: key check + keep", replay_floor),
    ):
        print(f"  {label:48s} {per_tensor_us(fn, a.tensors, a.reps):6.2f}")


if __name__ == "__main__":
    main()
