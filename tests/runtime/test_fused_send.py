"""The fused bucket fill (runtime/weight_sync/sender/fused_send.py) against verl 0.9.1's own sender, on verl's real receiver.

As in test_sync_timing.py: verl's ``bucketed_weight_transfer`` module loaded from its file, the real sender and
receiver over a real zmq ipc socket in shared-memory mode (their CPU path), the receiver in a thread. Each case
runs verl's sender and the fused one on the same weights and compares what the receiver got: every metadata
message (names, shapes, dtypes, offsets: the bucket layout) and every tensor's bytes.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading

import pytest
import torch

from fp8spec.runtime.weight_sync.receiver import lazy_receive
from fp8spec.runtime.weight_sync.sender import fused_send, sync_timing
from tests.conftest import require

from .test_activation import _run
from .test_sync_timing import MOD, CpuDevice, _module
from .test_sync_timing import _sync as timed_sync

require("zmq")
require("verl")


def _recording(receiver_cls, on_message):
    """``receiver_cls`` calling ``on_message`` with every bucket metadata message it receives."""

    class Recorder(receiver_cls):
        def _init_socket(self):
            super()._init_socket()
            recv = self.socket.recv_pyobj

            def recv_pyobj(*a, **k):
                obj = recv(*a, **k)
                if isinstance(obj, dict) and "bucket_meta" in obj:
                    on_message(obj)
                return obj

            self.socket.recv_pyobj = recv_pyobj

    return Recorder


def _sync(mod, tmp_path, weights, bucket_mb, name):
    """One sync: what the receiver saw (every metadata message, every tensor cloned)."""
    metas = []

    def record(obj):
        metas.append({n: (tuple(m["shape"]), m["dtype"], m["offset"]) for n, m in obj["bucket_meta"].items()})

    recorder = _recording(mod.BucketedWeightReceiver, record)
    sender, got, _ = timed_sync(mod, tmp_path, weights, bucket_mb, name, receiver=recorder)
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


@pytest.mark.parametrize("table,packed", [(False, False), (True, False), (True, True)],
                         ids=["runs", "table", "table-packed"])
@pytest.mark.parametrize("flush", [(fused_send.FLUSH_BYTES, fused_send.FLUSH_TENSORS), (4096, 3)])
def test_same_buckets_and_bytes_as_verls_sender(tmp_path, monkeypatch, flush, table, packed):
    # packed: the metadata as a PackedMeta, pickled across the socket; verl's own receiver reads it as its dict
    # table: the table fill read by its reference copy (the CPU has no Triton); the odd-sized bf16 tensor, the
    # 0-dim one, the strided one and the int64 one shift offsets off the 16-byte grid and take the runs
    weights = _weights()
    _, ref_metas, ref = _sync(_module(CpuDevice()), tmp_path, weights, bucket_mb=1, name="verl")
    monkeypatch.setattr(fused_send, "FLUSH_BYTES", flush[0])
    monkeypatch.setattr(fused_send, "FLUSH_TENSORS", flush[1])
    mod = _module(CpuDevice())
    fused_send.patch_bucket_sender_fused(mod, pipeline=False, table=table, packed=packed)
    fused_send.patch_bucket_sender_fused(mod, pipeline=False, table=table, packed=packed)  # idempotent
    tabled = []
    launch = fused_send.gather_copy.launch
    monkeypatch.setattr(fused_send.gather_copy, "launch", lambda buf, t: (tabled.extend(t.keep), launch(buf, t)))
    _, metas, got = _sync(mod, tmp_path, weights, bucket_mb=1, name="fused")
    # the contiguous tensors at 16-byte offsets, sizes and addresses went through the table, the others (the
    # strided one, and those after the odd-sized one until the next bucket starts at 0) through the runs
    offsets = {n: o for m in ref_metas for n, (_, _, o) in m.items()}
    aligned = [n for n, w in weights if w.is_contiguous() and not (w.data_ptr() | w.nbytes | offsets[n]) % 16]
    assert [id(t) for t in tabled] == ([id(w) for n, w in weights if n in aligned] if table else [])
    assert 0 < len(aligned) < len(weights) - 50
    assert len(ref_metas) > 2  # several buckets, the last one by is_last
    assert metas == ref_metas  # the same layout, bucket by bucket: names, shapes, dtypes, offsets
    assert [n for n, _ in got] == [n for n, _ in weights]
    assert all(_equal(a, b) for (_, a), (_, b) in zip(got, ref))
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))


def _cast_weights():
    """float32 ``*.weight`` tensors (cast) among others that keep their dtype: BF16 weights, float32 KV scales
    (``*_scale``, a 0-dim one), int64, an odd-sized BF16 tensor that shifts the offsets, a strided float32 weight."""
    g = torch.Generator().manual_seed(5)
    w = [(f"layers.{i}.q_proj.weight", torch.randn(300 + 7 * i, 256, generator=g)) for i in range(10)]
    w += [("layers.0.attn.k_scale", torch.tensor(0.0213)), ("odd", torch.randn(3, 5, generator=g).to(torch.bfloat16))]
    w += [("layers.0.norm.weight", torch.randn(1024, generator=g)), ("t.weight", torch.randn(64, 96, generator=g).t())]
    w += [("layers.1.attn.v_scale", torch.tensor([0.0311])), ("idx", torch.arange(9))]
    w += [(f"experts.{j}.weight", torch.randn(40, 33, generator=g)) for j in range(200)]
    # values whose BF16 rounding is a tie or carries into the exponent: the cast must round as torch's does
    w += [("ties.weight", torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 2 - 2**-9, -(1 + 2**-8), 3.0e38]))]
    return w


@pytest.mark.parametrize("pipeline,table", [(False, False), (False, True), (True, True)],
                         ids=["runs", "table", "pipelined-table"])
def test_cast_sends_float32_weights_as_the_bf16_verls_receiver_would_load(tmp_path, monkeypatch, pipeline, table):
    # verl's receiver hands each tensor to the engine's loader, which for a BF16 engine keeps v.to(bfloat16):
    # with the cast the bucket carries exactly that, and everything not a float32 *.weight as it came
    weights = _cast_weights()
    mod = _module(CpuDevice())
    fused_send.patch_bucket_sender_fused(mod, pipeline=pipeline, table=table, cast=torch.bfloat16)
    launch, cast_tabled = fused_send.gather_copy.launch, []
    monkeypatch.setattr(fused_send.gather_copy, "launch", lambda buf, t: (
        cast_tabled.extend(t.keep) if t.cast is not None else None, launch(buf, t)))
    _, metas, got = _sync(mod, tmp_path, weights, bucket_mb=1, name=f"cast{pipeline}{table}")
    # with the table every contiguous float32 weight went through the cast table (the strided one did not)
    contiguous = [w for n, w in weights if w.dtype == torch.float32 and n.endswith(".weight") and w.is_contiguous()]
    assert [id(w) for w in cast_tabled] == ([id(w) for w in contiguous] if table else [])
    want = [
        (n, w.to(torch.bfloat16) if w.dtype == torch.float32 and n.endswith(".weight") else w) for n, w in weights
    ]
    assert [n for n, _ in got] == [n for n, _ in want]
    bad = [n for (n, a), (_, b) in zip(got, want) if not (_equal(a, b) and a.view(-1).view(torch.uint8).equal(
        b.contiguous().view(-1).view(torch.uint8)))]
    assert bad == []
    dtypes = {n: d for m in metas for n, (_, d, _) in m.items()}
    assert dtypes["layers.0.attn.k_scale"] == dtypes["layers.1.attn.v_scale"] == torch.float32
    assert dtypes["layers.0.q_proj.weight"] == dtypes["t.weight"] == torch.bfloat16
    # half the bytes of every float32 weight, in more than one bucket
    def sent(ms):
        return sum(math.prod(shape) * d.itemsize for m in ms for shape, d, _ in m.values())

    f32 = sum(w.nbytes for n, w in weights if w.dtype == torch.float32 and n.endswith(".weight"))
    assert len(metas) > 1 and sent(metas) == sum(w.nbytes for _, w in weights) - f32 // 2


@pytest.mark.parametrize("cast", [None, torch.bfloat16], ids=["as-sent", "cast"])
def test_the_senders_one_question_per_tensor_answers_as_the_separate_ones(cast):
    # the sender asks sent() once per tensor and passes its dtype on (the per-tensor loop is the trainer's cost):
    # the answers are those of sent_as / nbytes / fits, up to the last byte of the bucket
    fill = fused_send.BucketFill(torch.empty(4096, dtype=torch.uint8), 4096, cast=cast)
    fill.add("odd", torch.ones(3, dtype=torch.bfloat16))  # offset 6: every dtype after it aligns differently
    for name, w in _cast_weights()[:14]:
        dtype, nbytes = fill.sent(name, w)
        assert dtype == fill.sent_as(name, w) and nbytes == fill.nbytes(name, w) == w.numel() * dtype.itemsize
        assert dtype == (torch.bfloat16 if cast and w.dtype == torch.float32 and name.endswith(".weight") else w.dtype)
        at = (6 + dtype.itemsize - 1) // dtype.itemsize * dtype.itemsize
        assert fill.room(dtype, 4096 - at) and not fill.room(dtype, 4096 - at + 1)
        assert fill.fits(w, name) == fill.room(dtype, nbytes)


@pytest.mark.parametrize("cast", [None, torch.bfloat16], ids=["as-sent", "cast"])
def test_the_lazy_receiver_hands_the_engine_the_dtype_the_sender_cast_to(tmp_path, cast):
    # the engine's hook refuses a cast bucket when its own dtype differs (test_direct_sync_hook): it learns of the
    # cast from each message, through the lazy receiver's views
    casts = []
    _pipelined(tmp_path, _cast_weights(), f"castmsg{cast}", cast=cast, casts=casts)
    assert len(casts) > 1 and set(casts) == {None if cast is None else "bfloat16"}
    # a trainer that sends BF16 (Megatron) casts nothing, and its buckets say nothing of a cast
    casts = []
    bf16 = [(n, w.to(torch.bfloat16)) for n, w in _cast_weights() if w.dtype == torch.float32]
    _pipelined(tmp_path, bf16, f"castbf16{cast}", cast=cast, casts=casts)
    assert len(casts) > 1 and set(casts) == {None}


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


@pytest.mark.parametrize("table", [False, True], ids=["runs", "table"])
@pytest.mark.parametrize("packed", [False, True], ids=["dicts", "packed"])
def test_sync_timing_wraps_the_fused_fill(tmp_path, caplog, table, packed):
    import logging

    dev = CpuDevice()
    mod = _module(dev)
    fused_send.patch_bucket_sender_fused(mod, table=table, packed=packed)
    sync_timing.patch_bucket_sender(mod)
    weights = _weights()
    caplog.set_level(logging.INFO, logger="fp8spec.runtime.weight_sync.sender.sync_timing")
    before = fused_send.gather_copy.STATS["tensors"]
    sender, metas, got = _sync(mod, tmp_path, weights, bucket_mb=1, name="timed")
    st = sender._fp8spec_send_times
    assert (st.tensors, st.buckets) == (len(weights), len(metas))
    assert st.bytes == sum(w.nbytes for _, w in weights)  # a PackedMeta counted from its lists
    assert dev.syncs >= len(metas)  # the fill's device syncs go through verl's (timed) get_torch_device
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))
    # the line says how many tensors the table copied (none without it)
    tabled = fused_send.gather_copy.STATS["tensors"] - before
    (line,) = [r.getMessage() for r in caplog.records if "weight sync sent" in r.getMessage()]
    assert (tabled > 0) == table
    assert line.endswith(f" ({tabled} tensors copied through the table)") == table
    assert (st.launches > 0) == table  # the table's launches were timed on the host (none without the table)


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


def test_activated_with_direct_sync_and_before_the_timing_line_only_when_that_is_asked_for():
    code = """
import json, fp8spec.runtime as rt
from fp8spec.runtime import _importhook
print(json.dumps({'order': [c.hook.installer.rsplit('.', 2)[-2] for c in _importhook._pending.get(%r, [])]}))
""" % (MOD,)
    plain = _run(code, {"FP8SPEC_RUNTIME_PATCHES": "direct_sync", "FP8SPEC_FUSED_SEND": "0"})  # always on
    assert plain["order"] == ["lazy_receive", "flat_receive", "fused_send"], json.dumps(plain)
    timed = _run(code, {"FP8SPEC_RUNTIME_PATCHES": "sync_timing,direct_sync"})
    assert timed["order"] == ["lazy_receive", "flat_receive", "fused_send", "sync_timing"], json.dumps(timed)


# ----------------------------------------------------------------------------- the pipelined halves
BUCKET = 1 << 20


def _pipelined(tmp_path, weights, name, lazy=True, hold_s=0.0, table=False, packed=False, cast=None, casts=None):
    """One sync from the pipelined fused sender to verl's receiver (``lazy``: fp8spec's, which acks early).
    Per message: ``(early flag, {name: offset}, is_last)``; per bucket the tensors as the callback read them at
    its END, after ``hold_s`` (the engine's work: the sender fills the other half meanwhile)."""
    import time

    mod = _module(CpuDevice())
    fused_send.patch_bucket_sender_fused(mod, pipeline=True, table=table, packed=packed, cast=cast)
    if lazy:
        lazy_receive.patch_bucket_receiver_lazy(mod)
    msgs, seen = [], []

    def record(obj):
        offs = {n: m["offset"] for n, m in obj["bucket_meta"].items()}
        msgs.append((obj.get(lazy_receive.EARLY_ACK, False), offs, obj["is_last"]))

    class Receiver(_recording(mod.BucketedWeightReceiver, record)):
        def receive_weights(self, on_bucket_received):
            def on_bucket(weights, is_last):
                time.sleep(hold_s)
                if casts is not None:
                    casts.append(getattr(weights, "cast", "no attribute"))
                seen.append([(n, t.clone()) for n, t in weights])
                on_bucket_received(weights, is_last)

            out = super().receive_weights(on_bucket)
            seen.append(getattr(self, "_fp8spec_early_acks", 0))
            return out

    timed_sync(mod, tmp_path, weights, 1, name, receiver=Receiver)
    early_acks = seen.pop()
    return msgs, seen, early_acks


def _half_of(offsets, sizes):
    h = BUCKET // 2 // fused_send.ALIGN * fused_send.ALIGN
    lo, hi = min(offsets.values()), max(o + sizes[n] for n, o in offsets.items())
    return 0 if hi <= h else 1 if lo >= h else "whole"


def test_pipelined_buckets_alternate_halves_and_verls_own_receiver_reads_them_right(tmp_path):
    weights = _weights()
    sizes = {n: w.nbytes for n, w in weights}
    msgs, seen, early_acks = _pipelined(tmp_path, weights, "verlrecv", lazy=False)
    assert early_acks == 0  # verl's receiver ignores the flag: it acks each bucket once processed
    halves = [_half_of(offs, sizes) for _, offs, _ in msgs]
    assert len(msgs) > 3 and halves == [i % 2 for i in range(len(msgs))]
    assert [e for e, _, _ in msgs] == [True] * (len(msgs) - 1) + [False]  # never on the last bucket
    got = [p for bucket in seen for p in bucket]
    assert [n for n, _ in got] == [n for n, _ in weights]
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))


@pytest.mark.parametrize("lazy,table,packed", [(False, False, False), (True, False, False), (True, True, False),
                                               (True, True, True), (False, True, True)],
                         ids=["verl-receiver", "lazy-receiver", "lazy-receiver-table", "lazy-receiver-packed",
                              "verl-receiver-packed"])
def test_pipelined_the_sender_never_writes_a_half_the_engine_is_still_reading(tmp_path, lazy, table, packed):
    # the engine holds each bucket 20 ms: with early acks the trainer fills the other half meanwhile; a region
    # reused too soon would change the bytes under the callback before it reads them. packed: fp8spec's receiver
    # builds the views from the PackedMeta's lists (and acks early), verl's reads it as its dict
    weights = _weights()
    msgs, seen, early_acks = _pipelined(tmp_path, weights, f"hold{lazy}{table}{packed}", lazy=lazy, hold_s=0.02,
                                        table=table, packed=packed)
    assert early_acks == (len(msgs) - 1 if lazy else 0)
    got = [p for bucket in seen for p in bucket]
    assert [n for n, _ in got] == [n for n, _ in weights]
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))


def test_a_tensor_larger_than_a_half_gets_the_whole_buffer_once_nothing_is_in_flight(tmp_path):
    g = torch.Generator().manual_seed(3)
    small = [(f"s{i}", torch.randn(20_000, generator=g)) for i in range(9)]  # 80 KB each
    big = ("big", torch.randn(170_000, generator=g))  # 680 KB: more than a half (512 KB), less than a bucket
    weights = small[:7] + [big] + small[7:]
    sizes = {n: w.nbytes for n, w in weights}
    msgs, seen, early_acks = _pipelined(tmp_path, weights, "big", hold_s=0.02)
    where = [(_half_of(offs, sizes), early, "big" in offs) for early, offs, _ in msgs]
    # s0-s5 fill half 0, s6 starts half 1; the big tensor drains half 1 without an early ack, gets the whole
    # buffer (acked once processed, the small ones after it fill it too), then the halves start again
    assert where == [(0, True, False), (1, False, False), ("whole", False, True)], where
    assert msgs[2][1]["big"] == 0  # the whole-buffer bucket starts with it
    assert early_acks == 1
    got = [p for bucket in seen for p in bucket]
    assert [n for n, _ in got] == [n for n, _ in weights]
    assert all(_equal(t, w) for (_, t), (_, w) in zip(got, weights))


def test_the_sender_gets_the_fused_fill_and_the_cast_switch_from_the_environment():
    code = """
import json, fp8spec.runtime as rt
from fp8spec.runtime import _importhook
from fp8spec.runtime.weight_sync.sender import fused_send
seen = []
fused_send.patch_bucket_sender_fused = lambda mod, pipeline=True, table=False, cast=None, packed=False: (
    seen.append([pipeline, table, str(cast), packed]))
for hook in _importhook._pending.get(%r, []):
    if hook.hook.installer.endswith('fused_send.install'):
        hook(None)
print(json.dumps({'seen': seen}))
""" % (MOD,)
    base = {"FP8SPEC_RUNTIME_PATCHES": "direct_sync"}
    # the table fill: None = where the Triton kernel runs; the pipeline, the BF16 cast and the packed metadata on
    assert _run(code, base)["seen"] == [[True, None, "torch.bfloat16", True]]
    assert _run(code, dict(base, FP8SPEC_SEND_CAST_BF16="0"))["seen"] == [[True, None, "None", True]]
    # the former switches of finished comparisons do nothing
    old = dict.fromkeys(("FP8SPEC_FUSED_SEND", "FP8SPEC_SEND_PIPELINE", "FP8SPEC_SEND_TABLE", "FP8SPEC_SEND_PACKED_META"), "0")
    assert _run(code, dict(base, **old))["seen"] == [[True, None, "torch.bfloat16", True]]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("table", [False, None], ids=["runs", "table"])
def test_gpu_fill_with_cuda_and_host_tensors_equals_the_sources(table):
    buf = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    fill = fused_send.BucketFill(buf, buf.numel(), table)
    assert (fill.table is not None) == (table is None)  # None: the Triton kernel runs here
    g = torch.Generator().manual_seed(1)
    weights = [(f"w{i}", torch.randn(97, 64, generator=g).to(torch.bfloat16).cuda()) for i in range(200)]
    weights += [(f"big{i}", torch.randn(300 + i, 512, generator=g).cuda()) for i in range(3)]  # several chunks
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("table", [False, None], ids=["runs", "table"])
def test_gpu_cast_fill_equals_torchs_cast_of_the_sources(table):
    # CUDA's cat into a BF16 view of the bucket from float32 sources (and a host shard's cast copy): the bytes
    # of torch's own .to(bfloat16), ties and exponent carries included; the rest byte-equal to the sources
    buf = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    fill = fused_send.BucketFill(buf, buf.numel(), table, cast=torch.bfloat16)
    weights = [(n, w.cuda() if n != "layers.0.norm.weight" else w) for n, w in _cast_weights()]
    for n, w in weights:
        assert fill.fits(w, n)
        fill.add(n, w)
    fill.flush()
    torch.cuda.synchronize()
    for n, w in weights:
        m = fill.meta[n]
        want = w.to(torch.bfloat16) if m["dtype"] != w.dtype else w
        view = buf[m["offset"] : m["offset"] + want.nbytes].view(dtype=m["dtype"]).view(w.shape)
        assert torch.equal(view.cpu().view(-1).view(torch.uint8), want.cpu().contiguous().view(-1).view(torch.uint8)), n
