"""The fused bucket fill (fp8spec/runtime/fused_send.py) against verl 0.9.1's own sender, on verl's real receiver.

As in test_sync_timing.py: verl's ``bucketed_weight_transfer`` module loaded from its file, the real sender and
receiver over a real zmq ipc socket in shared-memory mode (their CPU path), the receiver in a thread. Each case
runs verl's sender and the fused one on the same weights and compares what the receiver got: every metadata
message (names, shapes, dtypes, offsets: the bucket layout) and every tensor's bytes.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import torch

from fp8spec.runtime import fused_send, sync_timing

from .test_activation import _run
from .test_sync_timing import MOD, CpuDevice, _module
from .test_sync_timing import _sync as timed_sync

pytest.importorskip("zmq")
pytest.importorskip("verl")


def _sync(mod, tmp_path, weights, bucket_mb, name):
    """One sync: what the receiver saw (every metadata message, every tensor cloned)."""
    metas = []

    class Recorder(mod.BucketedWeightReceiver):
        def _init_socket(self):
            super()._init_socket()
            recv = self.socket.recv_pyobj

            def recv_pyobj(*a, **k):
                obj = recv(*a, **k)
                if isinstance(obj, dict) and "bucket_meta" in obj:
                    metas.append(
                        {
                            n: (tuple(m["shape"]), m["dtype"], m["offset"])
                            for n, m in obj["bucket_meta"].items()
                        }
                    )
                return obj

            self.socket.recv_pyobj = recv_pyobj

    sender, got, _ = timed_sync(mod, tmp_path, weights, bucket_mb, name, receiver=Recorder)
    return sender, metas, got


def _weights():
    g = torch.Generator().manual_seed(0)
    w = [(f"layers.{i}.qkv", torch.randn(300 + 7 * i, 256, generator=g)) for i in range(12)]
    # alignment: an odd-sized bf16 tensor before float32 ones, a 0-dim tensor, a transposed (strided) one, int64
    w += [
        ("odd", torch.randn(3, 5, generator=g).to(torch.bfloat16)),
        ("after_odd", torch.randn(7, generator=g)),
    ]
    w += [
        ("scalar", torch.tensor(1.5)),
        ("t", torch.randn(64, 96, generator=g).t()),
        ("idx", torch.arange(9)),
    ]
    w += [(f"experts.{j}.w", torch.randn(40, 33, generator=g).to(torch.bfloat16)) for j in range(300)]
    return w


def _equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("flush", [(fused_send.FLUSH_BYTES, fused_send.FLUSH_TENSORS), (4096, 3)])
def test_same_buckets_and_bytes_as_verls_sender(tmp_path, monkeypatch, flush):
    weights = _weights()
    _, ref_metas, ref = _sync(_module(CpuDevice()), tmp_path, weights, bucket_mb=1, name="verl")
    monkeypatch.setattr(fused_send, "FLUSH_BYTES", flush[0])
    monkeypatch.setattr(fused_send, "FLUSH_TENSORS", flush[1])
    mod = _module(CpuDevice())
    fused_send.patch_bucket_sender_fused(mod)
    fused_send.patch_bucket_sender_fused(mod)  # idempotent
    _, metas, got = _sync(mod, tmp_path, weights, bucket_mb=1, name="fused")
    assert len(ref_metas) > 2  # several buckets, the last one by is_last
    assert metas == ref_metas  # the same layout, bucket by bucket: names, shapes, dtypes, offsets
    assert [n for n, _ in got] == [n for n, _ in weights]
    assert all(_equal(a, b) for (_, a), (_, b) in zip(got, ref))
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))


def test_a_tensor_larger_than_a_bucket_is_refused_as_verl_refuses_it_in_shm_mode(tmp_path):
    weights = [("small", torch.ones(10)), ("big", torch.ones(300_000))]  # 1.2 MB > a 1 MB bucket
    errors = []
    for fused in (False, True):
        mod = _module(CpuDevice())
        if fused:
            fused_send.patch_bucket_sender_fused(mod)
        sender = mod.BucketedWeightSender(f"ipc://{tmp_path}/big{fused}.sock", bucket_size_mb=1, use_shm=True)
        # the first bucket ("small") goes out before the big one is refused: a receiver answers it
        done = threading.Event()

        def receive(handle=f"ipc://{tmp_path}/big{fused}.sock", mod=mod, done=done):
            r = mod.BucketedWeightReceiver(handle, torch.device("cpu"), use_shm=True)
            r._init_socket()
            r._init_buffer()
            r.socket.recv_pyobj()
            r.socket.send(b"")
            done.wait(10)
            r._cleanup()

        th = threading.Thread(target=receive)
        th.start()
        with pytest.raises(AssertionError) as err:
            asyncio.run(sender.async_send_weights(iter(weights)))
        done.set()
        th.join(30)
        errors.append(str(err.value))
    assert all("Weight big(" in e and "too large to fit in the bucket" in e for e in errors), errors


def test_sync_timing_wraps_the_fused_fill(tmp_path):
    dev = CpuDevice()
    mod = _module(dev)
    fused_send.patch_bucket_sender_fused(mod)
    sync_timing.patch_bucket_sender(mod)
    weights = _weights()
    sender, metas, got = _sync(mod, tmp_path, weights, bucket_mb=1, name="timed")
    st = sender._fp8spec_send_times
    assert (st.tensors, st.buckets) == (len(weights), len(metas))
    assert dev.syncs >= len(metas)  # the fill's device syncs go through verl's (timed) get_torch_device
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))


def test_installed_after_sync_timing_it_refuses_instead_of_dropping_the_timing_line():
    # seen on the H200 (2026-12-02): the probe installed the fill after the runtime's timing wrapper, and the
    # replaced send method lost every "weight sync sent" line without a word
    mod = _module(CpuDevice())
    sync_timing.patch_bucket_sender(mod)
    wrapped = mod.BucketedWeightSender.async_send_weights
    with pytest.raises(RuntimeError, match="install fused_send first"):
        fused_send.patch_bucket_sender_fused(mod)
    assert mod.BucketedWeightSender.async_send_weights is wrapped
    assert not getattr(mod.BucketedWeightSender, fused_send.FLAG, False)


def test_activated_with_direct_sync_before_the_timing_line_only_when_asked():
    code = """
import json, fp8spec.runtime as rt
from fp8spec.runtime import _importhook
print(json.dumps({'pending': _importhook._pending.get(%r, []).__len__(),
                  'order': [getattr(c, '__qualname__', repr(c)) for c in _importhook._pending.get(%r, [])]}))
""" % (MOD, MOD)
    off = _run(code, {"FP8SPEC_RUNTIME_PATCHES": "direct_sync"})
    on = _run(code, {"FP8SPEC_RUNTIME_PATCHES": "direct_sync", "FP8SPEC_FUSED_SEND": "1"})
    assert on["pending"] == off["pending"] + 1
    fused_at = next(i for i, q in enumerate(on["order"]) if "_fused" in q)
    timing_at = next(i for i, q in enumerate(on["order"]) if q == "patch_bucket_sender")
    assert fused_at < timing_at, json.dumps(on)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_fill_with_cuda_and_host_tensors_equals_the_sources():
    buf = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    fill = fused_send.BucketFill(buf, buf.numel())
    g = torch.Generator().manual_seed(1)
    weights = [(f"w{i}", torch.randn(97, 64, generator=g).to(torch.bfloat16).cuda()) for i in range(200)]
    weights.insert(
        50, ("host", torch.randn(33, generator=g))
    )  # an offloaded shard: host-to-device, verl's copy
    weights.insert(120, ("strided", torch.randn(64, 32, generator=g).cuda().t()))
    for n, w in weights:
        assert fill.fits(w)
        fill.add(n, w)
    fill.flush()
    torch.cuda.synchronize()
    for n, w in weights:
        m = fill.meta[n]
        view = buf[m["offset"] : m["offset"] + w.nbytes].view(dtype=w.dtype).view(w.shape)
        assert torch.equal(view.cpu(), w.cpu()), n
