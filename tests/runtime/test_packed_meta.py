"""``PackedMeta`` (fp8spec/runtime/weight_sync/packed_meta.py): verl's bucket metadata as four lists.

What verl's receiver reads from it (every entry, through the Mapping) equals what verl's sender writes for the
same bucket; it survives the pickle round trip as itself, without a ``torch.Size`` per tensor; fp8spec's lazy receiver builds
the same views from it as from verl's dict, and acks it early. The end-to-end runs over verl's real sender and
receiver are in test_fused_send.py (``packed`` cases)."""

from __future__ import annotations

import pickle

import torch

from fp8spec.runtime.weight_sync.packed_meta import PackedMeta
from fp8spec.runtime.weight_sync.receiver import lazy_receive


def _bucket():
    g = torch.Generator().manual_seed(2)
    ws = [("a.weight", torch.randn(8, 16, generator=g).to(torch.bfloat16)), ("k_scale", torch.tensor(0.5)),
          ("b.weight", torch.randn(3, 5, generator=g)), ("idx", torch.arange(7))]
    buf = torch.zeros(4096, dtype=torch.uint8)
    verl, packed, off = {}, PackedMeta(), 0
    for name, w in ws:  # verl's sender: offsets aligned to the element size (bucketed_weight_transfer.py 127-130)
        off = (off + w.element_size() - 1) // w.element_size() * w.element_size()
        buf[off : off + w.nbytes].copy_(w.reshape(-1).view(torch.uint8))
        verl[name] = {"name": name, "shape": w.shape, "dtype": w.dtype, "offset": off, "handle": None}
        packed.add(name, tuple(w.shape), w.dtype, off)
        off += w.nbytes
    return ws, buf, verl, packed


def test_verls_receiver_reads_the_entries_verls_sender_writes():
    ws, _, verl, packed = _bucket()
    assert list(packed) == list(verl) and len(packed) == len(verl)
    for name, m in verl.items():
        got = packed[name]
        assert got == m and type(got["shape"]) is torch.Size  # verl calls shape.numel()
    assert dict(packed.items()) == verl
    assert packed.nbytes() == sum(w.nbytes for _, w in ws)


def test_the_pickle_round_trip_keeps_it_packed_and_smaller():
    _, _, verl, packed = _bucket()
    big = PackedMeta()
    for i in range(2000):
        big.add(f"model.layers.{i // 100}.mlp.experts.{i}.down_proj.weight", (768, 2048), torch.bfloat16, i * 4096)
    as_dicts = {n: dict(big[n]) for n in big}
    back = pickle.loads(pickle.dumps({"bucket_meta": big, "is_last": False}))["bucket_meta"]
    assert type(back) is PackedMeta and dict(back.items()) == as_dicts
    # the load cost of verl's form is a torch.Size rebuilt per tensor (docs/results.md#weight-sync): none here
    packed_bytes, dict_bytes = pickle.dumps(big), pickle.dumps(as_dicts)
    assert b"Size" in dict_bytes and b"Size" not in packed_bytes and len(packed_bytes) < len(dict_bytes)
    assert dict(pickle.loads(pickle.dumps(packed)).items()) == verl


def test_the_lazy_receiver_builds_the_same_views_and_acks_it_early():
    ws, buf, verl, packed = _bucket()
    dev = torch.device("cpu")
    from_dict = lazy_receive.BucketViews(buf, verl, dev, False, None)
    from_packed = lazy_receive.BucketViews(buf, packed, dev, False, None)
    assert len(from_packed) == len(ws) and from_packed.names() == [n for n, _ in ws]
    assert from_packed.built() == 0  # names without a view
    for (n1, t1), (n2, t2), (n, w) in zip(from_dict, from_packed, ws):
        assert n1 == n2 == n and t1.dtype == t2.dtype == w.dtype and t1.shape == t2.shape == w.shape
        assert t2.data_ptr() == t1.data_ptr() and torch.equal(t2, w)
    assert [n for n, _ in from_packed[1:3]] == ["k_scale", "b.weight"] and from_packed[-1][0] == "idx"
    msg = {"bucket_meta": packed, "is_last": False, lazy_receive.EARLY_ACK: True}
    assert lazy_receive.early_ack(msg)
    assert not lazy_receive.early_ack(dict(msg, is_last=True))
