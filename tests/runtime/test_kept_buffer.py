"""The kept weight-sync buffer (fp8spec/runtime/kept_buffer.py) on verl 0.9.1's own sender and receiver.

CPU: verl's module loaded from its file (as in test_sync_timing.py), its real sender and receiver over a real zmq
ipc socket in CUDA-IPC mode (``use_shm=False``) with the buffer on the CPU: the handle verl's ``reduce_tensor``
makes of a CPU tensor pickles the storage's bytes, so the receiver maps a copy and the tensors' contents are not
compared here (the GPU test below does, across two processes); the protocol is: what is allocated, sent, mapped
and kept, sync after sync. GPU: a receiver process and the sender on one GPU, real CUDA IPC, three syncs of
changing weights, every byte compared.
"""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest
import torch

from fp8spec.runtime import kept_buffer

from .test_activation import _run
from .test_sync_timing import MOD, CpuDevice, _module

pytest.importorskip("zmq")
pytest.importorskip("verl")


@pytest.fixture(autouse=True)
def fresh_state():
    def reset():
        kept_buffer._SENDER.update(key=None, buffer=None, handle=None, busy=False)
        kept_buffer._RECEIVER.clear()
        for k in kept_buffer.STATS:
            kept_buffer.STATS[k] = 0

    reset()
    yield
    reset()


def _cpu_module(keep=True):
    mod = _module(CpuDevice())
    mod.get_device_name, mod.get_device_id = (lambda: "cpu"), (lambda: 0)
    if keep:
        kept_buffer.patch_bucket_transfer(mod)
        kept_buffer.patch_bucket_transfer(mod)  # idempotent
    return mod


def _weights(seed):
    g = torch.Generator().manual_seed(seed)
    return [(f"w{i}", torch.randn(64, 96, generator=g)) for i in range(40)]


def _syncs(mod, tmp_path, n, bucket_mb=1):
    """``n`` syncs from verl's sender to verl's receiver (a thread), ``use_shm=False``: per sync the handle the
    receiver got, the buffer it mapped, and the sender's buffer."""
    got = []

    class Receiver(mod.BucketedWeightReceiver):
        def _init_buffer(self):
            recv = self.socket.recv_pyobj
            seen = {}

            def recv_pyobj(*a, **k):
                obj = recv(*a, **k)
                seen.setdefault("handle", obj)
                return obj

            self.socket.recv_pyobj = recv_pyobj
            super()._init_buffer()
            self.socket.recv_pyobj = recv
            got.append({"handle": seen["handle"], "mapped": self.buffer})

    for i in range(n):
        handle = f"ipc://{tmp_path}/kept{i}.sock"

        def receive(handle=handle):
            Receiver(handle, torch.device("cpu"), use_shm=False).receive_weights(lambda w, last: None)

        th = threading.Thread(target=receive)
        sender = mod.BucketedWeightSender(handle, bucket_size_mb=bucket_mb, use_shm=False)
        sent = []
        orig = sender._init_buffer

        def init(orig=orig, sender=sender, sent=sent):
            orig()
            sent.append(sender.buffer)

        sender._init_buffer = init

        async def main(sender=sender, th=th, i=i):
            th.start()
            await sender.async_send_weights(iter(_weights(i)))

        asyncio.run(main())
        th.join(30)
        assert not th.is_alive()
        assert sender.buffer is None  # verl's clean-up ran and dropped the sender's own reference
        got[-1]["sent"] = sent[0]
    return got


def test_the_sender_keeps_one_buffer_and_the_receiver_maps_it_once(tmp_path):
    got = _syncs(_cpu_module(), tmp_path, 3)
    # one allocation, one handle (kept, with one token), sent at every sync; one mapping reused by the receiver
    assert [type(g["handle"]).__name__ for g in got] == ["KeptHandle"] * 3
    assert len({g["handle"].token for g in got}) == 1
    assert all(g["sent"] is got[0]["sent"] for g in got)
    assert all(g["mapped"] is got[0]["mapped"] for g in got)
    assert got[0]["mapped"].dtype == torch.uint8 and got[0]["mapped"].numel() == 1 << 20
    assert kept_buffer.STATS == {"allocated": 1, "reused": 2, "fresh": 0, "mapped": 1, "map_reused": 2}
    assert kept_buffer._SENDER["busy"] is False  # released by the clean-up


def test_without_the_patch_verl_sets_a_buffer_up_at_every_sync(tmp_path):
    got = _syncs(_cpu_module(keep=False), tmp_path, 2)
    assert [type(g["handle"]).__name__ for g in got] == ["tuple", "tuple"]
    assert got[0]["sent"] is not got[1]["sent"] and got[0]["mapped"] is not got[1]["mapped"]
    assert kept_buffer.STATS["allocated"] == 0


def test_verls_own_receiver_maps_a_kept_handle_afresh_each_sync(tmp_path):
    # the sender keeps its buffer; a receiver without the patch (another module object: verl's, unpatched)
    # unpacks the kept handle as a plain one and maps it every sync, as it maps verl's own
    mod = _cpu_module()
    plain = _module(CpuDevice())
    mod.BucketedWeightReceiver = plain.BucketedWeightReceiver
    got = _syncs(mod, tmp_path, 2)
    assert [type(g["handle"]).__name__ for g in got] == ["KeptHandle"] * 2
    assert got[0]["sent"] is got[1]["sent"]
    assert got[0]["mapped"] is not got[1]["mapped"]
    assert kept_buffer.STATS["mapped"] == 0


def test_a_second_sender_while_the_buffer_is_in_use_gets_its_own():
    mod = _cpu_module()
    first = kept_buffer.sender_buffer(mod, 1 << 16)
    assert first is not None and kept_buffer._SENDER["busy"]
    assert kept_buffer.sender_buffer(mod, 1 << 16) is None  # in use: the caller sets verl's own up
    kept_buffer.release_sender()
    again = kept_buffer.sender_buffer(mod, 1 << 16)
    assert again is not None and again[0] is first[0] and again[1] is first[1]
    kept_buffer.release_sender()
    bigger = kept_buffer.sender_buffer(mod, 1 << 17)  # another size replaces the kept buffer
    assert bigger is not None and bigger[0].numel() == 1 << 17 and bigger[1].token != first[1].token
    assert kept_buffer.STATS["allocated"] == 2 and kept_buffer.STATS["fresh"] == 1


CALLS: list = []


def _rebuild(*args):  # verl's rebuild_ipc calls handle[0] with handle[1], the device index at position 6
    CALLS.append(args)
    return torch.zeros(4)


def test_the_receiver_passes_plain_handles_through_and_replaces_an_old_kept_mapping():
    mod = _cpu_module()
    calls = CALLS
    calls.clear()
    args = tuple(range(15))
    plain = (_rebuild, args)
    a = kept_buffer.KeptHandle(plain, "a")
    b = kept_buffer.KeptHandle(plain, "b")
    t1, t2 = mod.rebuild_ipc(a, 3), mod.rebuild_ipc(pickle.loads(pickle.dumps(a)), 3)
    assert t1 is t2 and len(calls) == 1 and calls[0][6] == 3  # verl's own rebuild, once
    assert mod.rebuild_ipc(plain, 3) is not t1 and len(calls) == 2  # a plain handle: verl's, every time
    t3 = mod.rebuild_ipc(b, 3)
    assert t3 is not t1 and len(calls) == 3 and list(kept_buffer._RECEIVER) == [("b", 3)]
    assert mod.rebuild_ipc(a, 3) is not t1 and len(calls) == 4  # the old mapping was let go


def test_activated_with_direct_sync_first_and_only_when_switched_on():
    code = """
import json, fp8spec.runtime as rt
from fp8spec.runtime import _importhook
print(json.dumps([getattr(c, '__qualname__', repr(c)) for c in _importhook._pending.get(%r, [])]))
""" % (MOD,)
    off = _run(code, {"FP8SPEC_RUNTIME_PATCHES": "direct_sync"})  # off by default: it holds a bucket
    on = _run(code, {"FP8SPEC_RUNTIME_PATCHES": "direct_sync", "FP8SPEC_SEND_KEEP_BUFFER": "1"})
    strip = [q.split(" at 0x")[0] for q in off]  # partials print their function's address
    assert "patch_bucket_transfer" not in off
    assert on[0] == "patch_bucket_transfer" and [q.split(" at 0x")[0] for q in on[1:]] == strip


# ----------------------------------------------------------------------------- GPU: real CUDA IPC
def _receiver_process(handle_prefix, n, conn):
    import hashlib

    import torch

    from fp8spec.runtime import kept_buffer as kb
    from fp8spec.runtime.weight_sync.receiver.lazy_receive import patch_bucket_receiver_lazy

    from .test_sync_timing import _module as load

    mod = load(torch.cuda)
    mod.is_support_ipc = lambda: True
    kb.patch_bucket_transfer(mod)
    patch_bucket_receiver_lazy(mod)
    out = []
    for i in range(n):
        digests = {}

        def on_bucket(weights, last, digests=digests):
            for name, t in weights:
                digests[name] = hashlib.sha256(t.cpu().contiguous().view(torch.uint8).numpy()).hexdigest()

        r = mod.BucketedWeightReceiver(f"{handle_prefix}{i}.sock", torch.device("cuda", 0), use_shm=False)
        r.receive_weights(on_bucket)
        out.append(digests)
    conn.send({"digests": out, "stats": dict(kb.STATS)})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_three_syncs_over_cuda_ipc_with_one_buffer_and_one_mapping(tmp_path):
    import hashlib
    import multiprocessing as mp

    from fp8spec.runtime.weight_sync.sender.fused_send import patch_bucket_sender_fused

    mod = _module(torch.cuda)
    mod.is_support_ipc = lambda: True
    kept_buffer.patch_bucket_transfer(mod)
    patch_bucket_sender_fused(mod, pipeline=True, table=None)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    prefix = f"ipc://{tmp_path}/gpu"
    proc = ctx.Process(target=_receiver_process, args=(prefix, 3, child))
    proc.start()
    want = []
    for i in range(3):
        weights = [(n, t.cuda()) for n, t in _weights(100 + i)]
        weights.append(("big", torch.randn(700, 1024, device="cuda")))  # larger than a bucket half
        want.append(
            {
                n: hashlib.sha256(t.cpu().contiguous().view(torch.uint8).numpy()).hexdigest()
                for n, t in weights
            }
        )
        sender = mod.BucketedWeightSender(f"{prefix}{i}.sock", bucket_size_mb=4, use_shm=False)
        asyncio.run(sender.async_send_weights(iter(weights)))
    assert parent.poll(120), "the receiver process sent nothing"
    got = parent.recv()
    proc.join(60)
    assert proc.exitcode == 0
    assert got["digests"] == want  # every tensor of every sync, byte for byte
    assert got["stats"]["mapped"] == 1 and got["stats"]["map_reused"] == 2
    assert kept_buffer.STATS["allocated"] == 1 and kept_buffer.STATS["reused"] == 2
