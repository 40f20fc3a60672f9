"""verl's bucket receiver with views built on access (runtime/weight_sync/receiver/lazy_receive.py), on verl 0.9.1's own sender.

As in test_sync_timing.py: verl's ``bucketed_weight_transfer`` module loaded from its file, its real sender and
receiver over a zmq ipc socket in shared-memory mode (the CPU path), the receiver in a thread. The lazy receiver
must hand its callback what verl's list held (names, order, bytes, bucket boundaries), build only what the
callback reads, and refuse to be installed under the flat-bucket wrapper it would otherwise drop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fp8spec.runtime.weight_sync.receiver import flat_receive, lazy_receive

from .test_fused_send import _equal, _weights
from .test_sync_timing import MOD, CpuDevice, _module
from .test_sync_timing import _sync as timed_sync


def _received(mod, tmp_path, name, read=None):
    """One sync; per bucket what the callback saw (its type, length, the pairs it read) and the views built."""
    seen = []

    class Receiver(mod.BucketedWeightReceiver):
        def receive_weights(self, on_bucket_received):
            def on_bucket(weights, is_last):
                pairs = [(n, t.clone()) for n, t in (weights if read is None else read(weights))]
                built = weights.built() if isinstance(weights, lazy_receive.BucketViews) else len(weights)
                seen.append((type(weights).__name__, len(weights), pairs, built, is_last))
                on_bucket_received(weights, is_last)

            return super().receive_weights(on_bucket)

    timed_sync(mod, tmp_path, _weights(), 1, name, receiver=Receiver)
    return seen


def test_the_callback_gets_what_verls_list_held(tmp_path):
    verl_seen = _received(_module(CpuDevice()), tmp_path, "verl")
    mod = _module(CpuDevice())
    lazy_receive.patch_bucket_receiver_lazy(mod)
    lazy_receive.patch_bucket_receiver_lazy(mod)  # idempotent
    lazy_seen = _received(mod, tmp_path, "lazy")
    assert {k for k, *_ in verl_seen} == {"list"} and {k for k, *_ in lazy_seen} == {"BucketViews"}
    assert len(lazy_seen) == len(verl_seen) > 1
    for (_, n1, p1, _, last1), (_, n2, p2, _, last2) in zip(verl_seen, lazy_seen):
        assert (n1, last1) == (n2, last2)
        assert [n for n, _ in p1] == [n for n, _ in p2]
        assert all(_equal(a, b) for (_, a), (_, b) in zip(p1, p2))


def test_only_what_the_callback_reads_is_built(tmp_path):
    mod = _module(CpuDevice())
    lazy_receive.patch_bucket_receiver_lazy(mod)
    seen = _received(mod, tmp_path, "some", read=lambda w: [w[0], w[-1]] if len(w) > 1 else [w[0]])
    assert all(built == min(n, 2) for _, n, _, built, _ in seen)
    expected = dict(_weights())
    for _, _, pairs, _, _ in seen:
        assert all(_equal(t, expected[n].contiguous()) for n, t in pairs)


def test_sequence_reads_are_kept_and_sliced_as_a_list_would_be():
    buf = torch.arange(64, dtype=torch.uint8)
    meta = {
        f"w{i}": {"name": f"w{i}", "shape": torch.Size([2, 2]), "dtype": torch.uint8, "offset": 4 * i, "handle": None}
        for i in range(5)
    }
    views = lazy_receive.BucketViews(buf, meta, torch.device("cpu"), False, None)
    assert len(views) == 5 and views.names() == [f"w{i}" for i in range(5)] and views.built() == 0
    assert views[-1][0] == "w4" and views[4][1] is views[-1][1]  # built once, kept
    assert [n for n, _ in views[1:3]] == ["w1", "w2"] and views.built() == 3
    assert torch.equal(views[2][1], torch.tensor([[8, 9], [10, 11]], dtype=torch.uint8))
    assert views[2][1].data_ptr() == buf.data_ptr() + 8  # a view of the buffer, as verl's


def test_installed_after_the_flat_bucket_wrapper_it_refuses_instead_of_dropping_it():
    mod = _module(CpuDevice())
    flat_receive.patch_bucket_receiver(mod, report=False)
    wrapped = mod.BucketedWeightReceiver.receive_weights
    with pytest.raises(RuntimeError, match="install lazy_receive first"):
        lazy_receive.patch_bucket_receiver_lazy(mod)
    assert mod.BucketedWeightReceiver.receive_weights is wrapped


def test_activated_with_direct_sync_before_the_flat_bucket_wrapper():
    code = """
import json, fp8spec.runtime as rt
from fp8spec.runtime import _importhook
print(json.dumps([repr(c) for c in _importhook._pending.get(%r, [])]))
""" % MOD
    env = dict(os.environ, FP8SPEC_RUNTIME_PATCHES="direct_sync")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    order = json.loads(out.stdout.strip().splitlines()[-1])
    lazy_at = next(i for i, q in enumerate(order) if "_lazy" in q)
    flat_at = next(i for i, q in enumerate(order) if "flat_receive" in q)
    assert lazy_at < flat_at, order
    env["FP8SPEC_RUNTIME_PATCHES"] = "fast_block_quant"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert not any("_lazy" in q for q in json.loads(out.stdout.strip().splitlines()[-1]))  # direct_sync only
