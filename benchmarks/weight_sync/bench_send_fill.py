"""The trainer side of a weight sync on the GPU, without an engine.

verl 0.9.1's own ``BucketedWeightSender`` (its module loaded from the installed verl) sends a model's checkpoint
tensors (BF16 or float32, on the GPU, the probe's names and shapes) into its CUDA bucket buffer; the receiver is
a socket that acks every message at once, so a sync costs what the trainer's side costs when the engine is
infinitely fast: the loop over the tensors, the bucket fill and the per-bucket device synchronisation. Variants,
each a fresh copy of verl's module: verl's own fill; the fused fill's gathered runs (``fused_send``, table off);
the fused fill with its table (``gather_copy``'s Triton kernel); each with the two-half pipeline as the runtime
sets it. ``sync_timing``'s split (loop + fill on the host / GPU wait) per sync; medians of ``--syncs`` after one
warm-up. The last sync of each variant checks every tensor's bytes in the buffer against its source.

    python -m benchmarks.weight_sync.bench_send_fill --cases qwen3-30b-a3b,qwen3-8b [--dtype bf16] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.engine.weight_sync_probe import case_config, checkpoint_shapes
from fp8spec.runtime.weight_sync.sender import fused_send, gather_copy, sync_timing  # noqa: E402

VARIANTS = ("iterate", "verl", "runs", "table")


def load_verl_module(tag: str):
    """A fresh copy of verl's bucketed_weight_transfer module (each variant patches its own)."""
    import verl

    path = Path(verl.__file__).parent / "workers/rollout/vllm_rollout/bucketed_weight_transfer.py"
    spec = importlib.util.spec_from_file_location(f"bwt_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class AckingSocket:
    """Stands for the engine's receiver: acks at once; with ``check`` every bucket's tensors are compared with
    their sources in the sender's buffer."""

    def __init__(self, sender, sources: dict, check: bool):
        self.sender, self.sources, self.check, self.checked, self.bad = sender, sources, check, 0, []

    def send_pyobj(self, obj):
        if self.check and isinstance(obj, dict) and "bucket_meta" in obj:
            buf = self.sender.buffer
            for name, m in obj["bucket_meta"].items():
                if m["handle"] is not None:  # larger than a bucket: sent as itself, not through the buffer
                    continue
                src = self.sources[name]
                got = buf[m["offset"] : m["offset"] + src.nbytes].view(src.dtype).view(src.shape)
                if not torch.equal(got.reshape(-1).view(torch.uint8), src.reshape(-1).view(torch.uint8)):
                    self.bad.append(name)
                self.checked += 1

    def recv(self):
        return b""

    def close(self):
        pass


def make_sender_cls(variant: str):
    mod = load_verl_module(variant)
    # no engine opens the buffer's CUDA IPC handle here, so a shared buffer would never be released: not shared
    mod.reduce_tensor = lambda tensor: None
    if variant in ("runs", "table"):
        fused_send.patch_bucket_sender_fused(mod, pipeline=True, table=None if variant == "table" else False)
    sync_timing.patch_bucket_sender(mod)
    return mod


def run_variant(variant: str, weights: list, bucket_mb: int, syncs: int) -> dict:
    from verl.workers.rollout.utils import ensure_async_iterator

    sources = dict(weights)
    rec = {"variant": variant, "sync_s": [], "host_s": [], "gpu_wait_s": []}
    if variant == "iterate":  # the floor: verl's async iteration over the same list, nothing else
        async def loop():
            async for _ in ensure_async_iterator(iter(weights)):
                pass

        for _ in range(syncs + 1):
            t = time.perf_counter()
            asyncio.run(loop())
            rec["sync_s"].append(time.perf_counter() - t)
        rec["median_s"] = statistics.median(rec["sync_s"][1:])
        return rec
    mod = make_sender_cls(variant)
    launches0 = dict(gather_copy.STATS)
    for i in range(syncs + 2):
        check = i == syncs + 1  # the last, untimed
        sender = mod.BucketedWeightSender(zmq_handle="ipc:///tmp/bench-send-fill.sock", bucket_size_mb=bucket_mb)
        sock = AckingSocket(sender, sources, check)
        # in place of verl's zmq socket; sync_timing's wrapper counts its buckets and times its acks
        sender._init_socket = lambda s=sender, k=sock: setattr(s, "socket", sync_timing._TimedSocket(k))
        torch.cuda.synchronize()
        t = time.perf_counter()
        asyncio.run(sender.async_send_weights(iter(weights)))
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        st = sender._fp8spec_send_times
        if check:
            rec["checked"], rec["bad"] = sock.checked, sock.bad[:10]
            rec["buckets"] = st.buckets
            continue
        rec["sync_s"].append(dt)
        rec["gpu_wait_s"].append(st.gpu_wait)
        rec["host_s"].append(dt - st.gpu_wait - st.engine)
        torch.cuda.empty_cache()
    rec["table"] = {k: gather_copy.STATS[k] - launches0[k] for k in launches0}
    for k in ("sync_s", "host_s", "gpu_wait_s"):
        rec[k.replace("_s", "") + "_median_s"] = statistics.median(rec[k][1:])
    rec["median_s"] = rec["sync_median_s"]
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="qwen3-30b-a3b,qwen3-8b")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--bucket-mb", type=int, default=2048)
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, triton kernel: "
          f"{gather_copy.get_kernel() is not None} {gather_copy._kernel_error or ''}", flush=True)
    results = {}
    for case in a.cases.split(","):
        shapes = checkpoint_shapes(case_config(case))
        g = torch.Generator(device="cuda").manual_seed(0)
        weights = []
        for name, shape in shapes:
            t = torch.empty(shape, dtype=dtype, device="cuda")
            t.normal_(0.0, 0.02, generator=g)
            weights.append((name, t))
        nbytes = sum(t.nbytes for _, t in weights)
        results[case] = {"tensors": len(weights), "gib": nbytes / 2**30}
        for v in a.variants.split(","):
            rec = run_variant(v, weights, a.bucket_mb, a.syncs)
            results[case][v] = rec
            per = rec["median_s"] / len(weights) * 1e6
            extra = "" if v == "iterate" else (
                f"  host {rec['host_median_s']:.3f} s, GPU wait {rec['gpu_wait_median_s']:.3f} s, "
                f"{rec['buckets']} buckets, checked {rec['checked']} bad {len(rec['bad'])}, table {rec['table']}")
            print(f"{case} {a.dtype} {v:8s} {rec['median_s']:.3f} s/sync ({per:.2f} us/tensor){extra}", flush=True)
        del weights
        torch.cuda.empty_cache()
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"send_fill_{a.dtype}.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    bad = [c for c, r in results.items() for v in VARIANTS if isinstance(r.get(v), dict) and r[v].get("bad")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
