"""verl's bucket receiver handing each bucket over as views built on access.

verl 0.9.1's ``BucketedWeightReceiver.receive_weights`` (``verl/workers/rollout/vllm_rollout/
bucketed_weight_transfer.py`` 269-310) builds a ``[(name, view), ...]`` list of every tensor of a bucket before it
calls back: a slice and two ``view`` calls per tensor. For Qwen3-30B-A3B that is 18,867 views per sync, about 0.3 s
(docs/results.md#weight-sync), while ``direct_sync`` reads the covered tensors straight
from the flat buffer by the metadata's offsets and needs views only of the few tensors verl's loader still takes.

``BucketViews`` is that list, made lazily: a read-only sequence of ``(name, tensor)`` over the bucket's metadata
whose items are built by verl's own expressions the first time they are read (and kept), so any consumer that
iterates gets what verl's list held. The loop around it is verl's, line for line: the same socket and buffer
set-up, the same device synchronisation and acks, the same clean-up. Installed with ``direct_sync`` only, before
its receiver patch (which wraps whatever ``receive_weights`` it finds).

One addition to verl's loop: a bucket message carrying ``EARLY_ACK`` (fp8spec's pipelined sender,
``fused_send``, which fills the other half of its buffer next) is acked on receipt, before it is processed, so the
trainer's fill of the next bucket overlaps the engine's work on this one. Never the last bucket (verl acks that
one in ``_cleanup``, after the buffer is released) and never a message carrying a CUDA IPC handle (the sender may
free that tensor once acked).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import torch

from fp8spec.runtime.weight_sync.packed_meta import PackedMeta

FLAG = "_fp8spec_lazy_receive"
# in a bucket message: its region stays untouched until the next message's ack
EARLY_ACK = "fp8spec_early_ack"
# in a bucket message: float32 weights were sent cast to this dtype (a name: "bfloat16")
CAST = "fp8spec_cast"
# this process's buckets acked on receipt (direct_sync's line per sync reports them)
STATS = {"early_acks": 0}


class BucketViews(Sequence):
    """A bucket's ``(name, tensor)`` pairs in metadata order, each built on first access as verl builds it."""

    __slots__ = ("_buffer", "_built", "_device", "_items", "_rebuild", "_use_shm", "bucket_meta", "cast")

    def __init__(
        self,
        buffer: Any,
        bucket_meta: Any,
        device: torch.device,
        use_shm: bool,
        rebuild: Any,
        cast: Any = None,
    ):
        """``cast``: the dtype name the sender cast float32 weights to (the message's ``CAST``), or None."""
        self.bucket_meta, self.cast = bucket_meta, cast
        # a PackedMeta (fp8spec's sender) is read by index, without a dict per tensor
        self._items = None if isinstance(bucket_meta, PackedMeta) else list(bucket_meta.items())
        self._buffer, self._device, self._use_shm, self._rebuild = buffer, device, use_shm, rebuild
        self._built: dict[int, tuple[str, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.bucket_meta) if self._items is None else len(self._items)

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        got = self._built.get(i)
        if got is None:
            if self._items is None:
                if not 0 <= i < n:
                    raise IndexError(i)
                got = self._built[i] = self._build_packed(i)
            else:
                got = self._built[i] = self._build(*self._items[i])
        return got

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for i in range(len(self)):
            yield self[i]

    def names(self) -> list[str]:
        """Every name, without building a view."""
        if self._items is None:
            return list(self.bucket_meta.names)
        return [name for name, _ in self._items]

    def _build_packed(self, i: int) -> tuple[str, torch.Tensor]:
        # the same view as _build, from the lists (a PackedMeta never holds a handle)
        m = self.bucket_meta
        shape, dtype, offset = m.shapes[i], m.dtypes[i], m.offsets[i]
        size = dtype.itemsize * math.prod(shape)
        tensor = self._buffer[offset : offset + size].view(dtype=dtype).view(shape)
        if self._use_shm:
            tensor = tensor.to(self._device)
        return m.names[i], tensor

    def built(self) -> int:
        """How many items were built (what a consumer actually read)."""
        return len(self._built)

    def _build(self, name: str, meta: dict) -> tuple[str, torch.Tensor]:
        # verl 0.9.1 bucketed_weight_transfer.py 288-297
        shape, dtype, offset, handle = meta["shape"], meta["dtype"], meta["offset"], meta["handle"]
        if handle is not None:
            return name, self._rebuild(handle, self._device.index)
        size = dtype.itemsize * shape.numel()
        tensor = self._buffer[offset : offset + size].view(dtype=dtype).view(shape)
        if self._use_shm:
            tensor = tensor.to(self._device)
        return name, tensor


def early_ack(metadata: dict) -> bool:
    """Whether this bucket message may be acked before it is processed (module docstring)."""
    return (
        metadata.get(EARLY_ACK) is True
        and not metadata["is_last"]
        and (
            isinstance(metadata["bucket_meta"], PackedMeta)  # never a handle
            or all(m.get("handle") is None for m in metadata["bucket_meta"].values())
        )
    )


def patch_bucket_receiver_lazy(module: ModuleType) -> None:
    """Give ``BucketedWeightReceiver`` in ``module`` (verl's bucketed_weight_transfer.py) lazy bucket views;
    idempotent. Install it before ``flat_receive.patch_bucket_receiver``, which wraps the method it finds."""
    cls = module.BucketedWeightReceiver
    if getattr(cls, FLAG, False):
        return
    if getattr(cls, "_fp8spec_flat_patched", False):
        # this patch replaces the method: installed after the flat-bucket wrapper it would drop it
        raise RuntimeError(
            "lazy_receive: BucketedWeightReceiver is already wrapped; install lazy_receive first"
        )

    @functools.wraps(cls.receive_weights)
    def receive_weights(self: Any, on_bucket_received: Any) -> None:
        try:
            self._init_socket()
            self._init_buffer()
            while True:
                metadata = self.socket.recv_pyobj()
                weights = BucketViews(
                    self.buffer,
                    metadata["bucket_meta"],
                    self.device,
                    self.use_shm,
                    module.rebuild_ipc,
                    metadata.get(CAST),
                )
                is_last = metadata["is_last"]
                early = early_ack(metadata)
                if early:
                    self.socket.send(b"")
                    self._fp8spec_early_acks = getattr(self, "_fp8spec_early_acks", 0) + 1
                    STATS["early_acks"] += 1
                on_bucket_received(weights, is_last)
                module.get_torch_device().synchronize()
                del weights
                if not is_last:
                    if not early:
                        self.socket.send(b"")
                else:
                    self._ack_pending = True
                    break
        finally:
            self._cleanup()

    cls.receive_weights = receive_weights
    setattr(cls, FLAG, True)
