"""The cost of one sync's bucket metadata on the CPU: verl's dict per tensor against
``PackedMeta``.

Qwen3-30B-A3B's 18,867 checkpoint names and shapes (from the model catalog, through
``tests/runtime/_qwen_shapes.py``), laid out as verl 0.9.1's sender writes its metadata
(``bucketed_weight_transfer.py`` 155-163: the name object shared by key and entry, ``torch.Size`` shapes), pickled
with ``send_pyobj``'s protocol and loaded back as the receiver's ``recv_pyobj`` does. Best of ``--reps`` for the
whole sync's metadata (all buckets together).

    python -m benchmarks.weight_sync.bench_meta_pickle [--reps 7]
"""

from __future__ import annotations

import argparse
import pickle
import time

import torch

from fp8spec.runtime.weight_sync.packed_meta import PackedMeta  # noqa: E402
from tests.runtime._qwen_shapes import catalog_config, checkpoint  # noqa: E402


def best(msg: dict, reps: int) -> tuple[float, float, int]:
    dumps = loads = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        raw = pickle.dumps(msg, pickle.DEFAULT_PROTOCOL)  # pyzmq's send_pyobj default
        dumps = min(dumps, time.perf_counter() - t)
        t = time.perf_counter()
        pickle.loads(raw)
        loads = min(loads, time.perf_counter() - t)
    return dumps, loads, len(raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    shapes = checkpoint(catalog_config("qwen3-30b-a3b"))
    verl, packed, offset = {}, PackedMeta(), 0
    for name, shape in shapes.items():
        verl[name] = {"name": name, "shape": torch.Size(shape), "dtype": torch.bfloat16, "offset": offset,
                      "handle": None}
        packed.add(name, tuple(shape), torch.bfloat16, offset)
        offset += 2 * int(torch.Size(shape).numel())
    print(f"torch {torch.__version__}, {len(shapes)} tensors, best of {a.reps}:")
    for label, meta in (("verl's dict per tensor", verl), ("PackedMeta", packed)):
        d, lo, n = best({"bucket_meta": meta, "is_last": False}, a.reps)
        print(f"  {label:24s} pickle {d * 1e3:6.1f} ms  unpickle {lo * 1e3:6.1f} ms  {n / 1e6:5.2f} MB")


if __name__ == "__main__":
    main()
