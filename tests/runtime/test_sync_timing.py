"""The trainer-side sync timing (fp8spec/runtime/weight_sync/sender/sync_timing.py) on verl 0.9.1's own sender and receiver.

The real ``BucketedWeightSender`` and ``BucketedWeightReceiver`` talk over a real zmq ipc socket in shared-memory
mode (their CPU path), receiver in a thread as in a colocated engine. The module is loaded from verl's file (its
package ``__init__`` imports vLLM); its ``get_torch_device`` is given a CPU device module (verl falls back to
``torch.cuda`` without an accelerator, whose ``synchronize`` needs CUDA): the protocol and the patch are verl's
and ours unchanged. Checked: the tensors arrive unchanged, one log line per sync with the tensor, bucket and byte
counts of what was sent, the waits add up to no more than the sync, the receiver's thread is not timed.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import os
import re
import threading
import time

import torch

from fp8spec.runtime.weight_sync.sender import sync_timing
from tests.conftest import require

require("zmq")
verl = require("verl")
MOD = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"


class CpuDevice:
    """The calls verl's module makes on its device module, for the CPU (counting the syncs)."""

    def __init__(self):
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1

    def empty_cache(self):
        pass

    def ipc_collect(self):
        pass


def _module(dev):
    path = os.path.join(
        os.path.dirname(verl.__file__), "workers/rollout/vllm_rollout/bucketed_weight_transfer.py"
    )
    spec = importlib.util.spec_from_file_location(MOD, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.get_torch_device = lambda: dev
    mod.is_support_ipc = lambda: False
    return mod


def _sync(mod, tmp_path, weights, bucket_mb, name, receiver=None):
    """One sync from verl's sender to ``receiver`` (default: verl's receiver class) in a thread."""
    handle = f"ipc://{tmp_path}/{name}.sock"
    got, buckets = [], []

    def receive():
        r = (receiver or mod.BucketedWeightReceiver)(handle, torch.device("cpu"), use_shm=True)
        r.receive_weights(lambda w, last: (buckets.append(len(w)), got.extend((n, t.clone()) for n, t in w)))

    th = threading.Thread(target=receive)
    sender = mod.BucketedWeightSender(handle, bucket_size_mb=bucket_mb, use_shm=True)

    async def main():
        th.start()
        await sender.async_send_weights(iter(weights))

    asyncio.run(main())
    th.join(30)
    assert not th.is_alive()
    return sender, got, buckets


def test_one_line_per_sync_with_what_was_sent(tmp_path, caplog):
    dev = CpuDevice()
    mod = _module(dev)
    sync_timing.patch_bucket_sender(mod)
    sync_timing.patch_bucket_sender(mod)  # idempotent
    g = torch.Generator().manual_seed(0)
    weights = [(f"layers.{i}.w", torch.randn(300 + 7 * i, 256, generator=g)) for i in range(24)]
    weights += [("norm", torch.randn(256, generator=g).to(torch.bfloat16))]
    caplog.set_level(logging.INFO, logger="fp8spec.runtime.weight_sync.sender.sync_timing")
    for k in range(2):
        sender, got, buckets = _sync(mod, tmp_path, weights, bucket_mb=2, name=f"s{k}")
        assert [n for n, _ in got] == [n for n, _ in weights]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(weights, got))
        st = sender._fp8spec_send_times
        assert (st.tensors, st.buckets) == (len(weights), len(buckets)) and st.buckets > 2
        assert st.bytes == sum(t.numel() * t.element_size() for _, t in weights)
        assert 0 < st.engine and 0 <= st.gpu_wait and st.engine + st.gpu_wait <= time_of(st)
        # the host's parts: each bucket's metadata send and the set-up were timed, and they fit in the host time
        assert st.sends > 0 and st.setup > 0 and st.launches == 0  # verl's own fill: no table launches
        host = time_of(st) - st.engine - st.gpu_wait
        assert st.setup + st.sends + st.launches + st.gc <= host
    lines = [r.getMessage() for r in caplog.records if r.name == "fp8spec.runtime.weight_sync.sender.sync_timing"]
    assert len(lines) == 2
    assert lines[0].startswith(f"fp8spec weight sync sent: {len(weights)} tensors, {len(buckets)} buckets, ")
    assert "trainer stream + fill" in lines[0] and "GPU wait" in lines[0] and "engine" in lines[0]
    assert re.search(r"fill \d+\.\d{3} s \(loop \d+\.\d{3}, set-up \d+\.\d{3}, launches 0\.000, "
                     r"sends \d+\.\d{3}, gc \d+\.\d{3}\), GPU wait", lines[0]), lines[0]
    # the sender's syncs (one per bucket) were timed; the receiver's (its thread has no sync in flight) were not
    assert dev.syncs >= 2 * len(buckets)


def time_of(st):
    return time.perf_counter() - st.start


def test_the_receivers_device_calls_pass_through():
    dev = CpuDevice()
    mod = _module(dev)
    sync_timing.patch_bucket_sender(mod)
    d = mod.get_torch_device()
    d.synchronize()
    d.empty_cache()
    assert dev.syncs == 1 and sync_timing._CURRENT.get() is None


def test_a_collection_during_the_sync_is_timed_as_gc_and_one_outside_is_not(tmp_path):
    dev = CpuDevice()
    mod = _module(dev)
    sync_timing.patch_bucket_sender(mod)
    assert gc.callbacks.count(sync_timing._gc_timer) == 1
    sync_timing.patch_bucket_sender(mod)  # idempotent: one callback
    sync_timing.patch_bucket_sender(_module(dev))  # a second module: still one callback per process
    assert gc.callbacks.count(sync_timing._gc_timer) == 1
    g = torch.Generator().manual_seed(1)
    weights = [(f"w{i}", torch.randn(64, 64, generator=g)) for i in range(8)]

    def collecting():  # the trainer's generator: a full collection in the middle of the stream
        for i, item in enumerate(weights):
            if i == 4:
                gc.collect()
            yield item

    handle = f"ipc://{tmp_path}/gc.sock"
    th = threading.Thread(
        target=lambda: mod.BucketedWeightReceiver(handle, torch.device("cpu"), use_shm=True).receive_weights(
            lambda w, last: None
        )
    )
    sender = mod.BucketedWeightSender(handle, bucket_size_mb=1, use_shm=True)

    async def main():
        th.start()
        await sender.async_send_weights(collecting())

    asyncio.run(main())
    th.join(30)
    st = sender._fp8spec_send_times
    assert st.gc > 0 and st._gc_at == 0.0
    gc.collect()  # no sync in flight: counted nowhere
    assert sender._fp8spec_send_times.gc == st.gc
