"""The trainer's bucket fill with a few copy launches per bucket instead of one per tensor.

verl 0.9.1's ``BucketedWeightSender.async_send_weights`` (``verl/workers/rollout/vllm_rollout/
bucketed_weight_transfer.py`` 102-166) fills each bucket tensor by tensor: a slice, two views and a ``copy_`` per
tensor, one device copy launch each. For Qwen3-30B-A3B that is 18,867 launches per sync, and the instrumented
sync of docs/results.md#weight-sync spent 0.67 s of 1.7 s waiting on this fill. Here the same loop places each tensor at
the offset verl would (same alignment, same bucket boundaries, same metadata: the receiver, and the direct path's
offsets cached per metadata message, see the same buckets) but gathers the tensors of a bucket into runs that one
``torch.cat(..., out=bucket_slice)`` writes (CUDA's cat copies up to 128 inputs per launch). A run is flushed
before the bucket is sent, and every ``FLUSH_BYTES`` so the tensors it holds stay bounded.

Pipelined (``pipeline=True``): verl's sender fills its one buffer, then waits for
the engine to process it before filling the next bucket, so a sync costs the trainer's fill plus the engine's
work (docs/results.md#weight-sync: 0.22 + 0.17 s on Qwen3-30B-A3B). Here the buckets alternate between the two halves of
the same buffer (no extra memory; the metadata offsets are absolute, so any receiver reads them right) and each
message says so (``EARLY_ACK``): fp8spec's receiver (``lazy_receive``) then acks on receipt and the trainer fills
the other half while the engine works. The receiver takes the next message only after it processed this one,
so the ack of bucket k means bucket k-1 is done and its half free. A tensor larger than a half gets the whole
buffer once nothing is in flight: the bucket before it goes without ``EARLY_ACK`` (acked when processed), and
so does the whole-buffer bucket. verl's own receiver ignores the key and acks when done: correct, no overlap.

Table fill (``table=True``): a tensor the Triton kernel of ``gather_copy`` can copy
(contiguous, on the buffer's device, address / size / offset in 16-byte words) costs four integers in a table
instead of a byte view for the gathered copy, and one launch per flush copies all of them; the rest (and every
tensor without CUDA and Triton) take the gathered runs above. The two never share a run: a run is always one
contiguous region of the buffer.

Cast (``cast=torch.bfloat16``, ``FP8SPEC_SEND_CAST_BF16``): an FSDP trainer sends float32 weights, and verl's
receiver casts each to the engine's dtype (``v.to(dtype)``, round to nearest even) before loading it, so the
bucket carries twice the bytes the engine keeps. With the switch a float32 tensor named ``*.weight`` is cast as it
is copied into the bucket and sent as BF16 (metadata says so): the same BF16 values the receiver's cast gives,
half the bucket bytes. Only for an engine whose dtype is BF16 (vLLM's, as verl's rollout ``dtype`` defaults);
anything else (KV scales pushed as float32 ``*_scale`` tensors) keeps its dtype. A bucket holding cast tensors
says so in its message (``lazy_receive.CAST``), and an engine of another dtype refuses it. Cast tensors take gathered
runs of their own (``torch.cat`` into a BF16 view of the bucket: one copy per tensor on CUDA, whose batched cat
needs equal dtypes), or, with the table fill, a cast table of their own (``gather_copy``: one launch for all).

Packed metadata (``packed=True``): each bucket's metadata goes as a
``packed_meta.PackedMeta`` (four lists) instead of a dict of dicts: for Qwen3-30B-A3B 5.6 ms of pickling and loading
per sync instead of 28 ms (docs/results.md#weight-sync); verl's receiver still reads it as its dict.

Everything around the loop stays verl's: its socket and buffer set-up (``_init_socket``, ``_init_buffer``), its
large-weight path (``_direct_send_large_weight``), its clean-up, and ``get_torch_device`` looked up in verl's
module at each call (``sync_timing`` wraps it). A tensor on another device than the bucket (an offloaded shard
going host-to-device) is copied the way verl copies it. Always on with ``direct_sync``.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch

from fp8spec.runtime.envs import SEND_CAST_BF16
from fp8spec.runtime.weight_sync.packed_meta import PackedMeta
from fp8spec.runtime.weight_sync.receiver.lazy_receive import CAST, EARLY_ACK
from fp8spec.runtime.weight_sync.sender import gather_copy
from fp8spec.runtime.weight_sync.sender.sync_timing import FLAG as TIMING_FLAG

FLAG = "_fp8spec_fused_send"
FLUSH_BYTES = 256 << 20  # source tensors a pending run may hold before it is written
FLUSH_TENSORS = 4096
ALIGN = 256  # the second half starts here-aligned, so every dtype's alignment holds in both halves
_FLOAT32 = torch.float32
_TABLE_ALIGN_MASK = gather_copy.ALIGN - 1


class BucketFill:
    """One bucket being filled in ``buffer[start:limit]``: verl's offsets (absolute in the buffer) and
    metadata, the copies gathered into runs."""

    def __init__(
        self,
        buffer: torch.Tensor,
        bucket_size: int,
        table: bool | None = False,
        cast: torch.dtype | None = None,
        packed: bool = False,
    ):
        """``table``: copy what it can through a ``gather_copy`` table (None: where the Triton kernel runs;
        True: also without it, through the table's reference copy, for tests). ``cast``: the dtype float32
        ``*.weight`` tensors are sent as (None: as they come). ``packed``: the metadata as a ``PackedMeta``."""
        self.buffer, self.bucket_size, self.cast, self.packed = buffer, bucket_size, cast, packed
        self._zeros = torch.zeros(16, dtype=torch.uint8, device=buffer.device)  # alignment padding
        if table is None:
            table = buffer.is_cuda and gather_copy.get_kernel() is not None
        self.table = gather_copy.CopyTable() if table else None
        self.cast_table = gather_copy.CopyTable(cast) if table and cast is not None else None
        self._device = buffer.get_device()  # -1 on the CPU, as Tensor.get_device gives it
        self.reset()

    def reset(self, start: int = 0, limit: int | None = None) -> None:
        self.meta: Any = PackedMeta() if self.packed else {}
        self.start, self.limit = start, self.bucket_size if limit is None else limit
        self.offset = self._run_start = start
        self._run_bytes = 0
        self._run: list[torch.Tensor] = []
        self._run_cast = False  # whether the pending run holds cast sources (written through a cast view)
        self.any_cast = False  # whether this bucket holds a cast tensor (its message says so)
        for t in (self.table, self.cast_table):
            if t is not None:
                t.clear()

    # The methods below run once per tensor, 18,867 times per Qwen3-30B-A3B sync, on the trainer's critical path
    # (docs/results.md#weight-sync): the sender asks ``sent`` once and passes its answer on, and the hot paths bind what
    # they read more than once to locals.

    def sent_as(self, name: str, weight: torch.Tensor) -> torch.dtype:
        """The dtype ``weight`` goes into the bucket as."""
        dtype = weight.dtype
        if dtype is _FLOAT32 and self.cast is not None and name.endswith(".weight"):
            return self.cast
        return dtype

    def sent(self, name: str, weight: torch.Tensor) -> tuple[torch.dtype, int]:
        """The dtype ``weight`` goes into the bucket as, and the bucket bytes it takes."""
        dtype = self.sent_as(name, weight)
        return dtype, weight.numel() * dtype.itemsize

    def nbytes(self, name: str, weight: torch.Tensor) -> int:
        """The bucket bytes ``weight`` takes."""
        return self.sent(name, weight)[1]

    def fits(self, weight: torch.Tensor, name: str = "") -> bool:
        return self.room(*self.sent(name, weight))

    def room(self, dtype: torch.dtype, nbytes: int) -> bool:
        """Whether ``nbytes`` sent as ``dtype`` fit after what the bucket holds."""
        return self._aligned(dtype) + nbytes <= self.limit

    def _aligned(self, dtype: torch.dtype) -> int:
        a = dtype.itemsize
        return (self.offset + a - 1) // a * a

    def add(self, name: str, weight: torch.Tensor, dtype: torch.dtype | None = None) -> None:
        """Place ``weight`` at verl's next offset (the caller checked ``fits``); ``dtype``: ``sent_as``'s answer,
        when the caller has it."""
        if dtype is None:
            dtype = self.sent_as(name, weight)
        a = dtype.itemsize
        offset = (self.offset + a - 1) // a * a
        if self.packed:
            self.meta.add(name, tuple(weight.shape), dtype, offset)
        else:
            self.meta[name] = {
                "name": name,
                "shape": weight.shape,
                "dtype": dtype,
                "offset": offset,
                "handle": None,
            }
        if dtype != weight.dtype:
            self.any_cast = True
            self._add_cast(weight, offset)
            return
        if self._run_cast:
            self._flush_run()
        table = self.table
        if table is not None and weight.get_device() == self._device and weight.is_contiguous():
            ptr, nbytes = weight.data_ptr(), weight.nbytes
            if not ((ptr | offset | nbytes) & _TABLE_ALIGN_MASK) and nbytes > 0:  # gather_copy.fits, inlined
                if self._run:  # the pending run ends where this tensor's padding starts
                    self._flush_run()
                table.add(weight, ptr, offset, nbytes)
                self.offset = self._run_start = offset + nbytes
                self._run_bytes = run_bytes = self._run_bytes + nbytes
                if run_bytes >= FLUSH_BYTES or len(table.keep) >= FLUSH_TENSORS:
                    self.flush()
                return
        if offset > self.offset:  # the padding belongs to the run, so a run is always [run start, offset)
            self._run.append(self._zeros[: offset - self.offset])
            self.offset = offset
        if weight.device != self.buffer.device:
            # across devices (host-to-device of an offloaded shard): the copy verl makes, after what is pending
            self.flush()
            region = self.buffer[offset : offset + weight.nbytes]
            region.view(dtype=weight.dtype).view(weight.shape).copy_(weight, non_blocking=True)
            self.offset = self._run_start = offset + weight.nbytes
            return
        self._run.append(weight.reshape(-1).view(torch.uint8))
        self.offset = offset + weight.nbytes
        self._run_bytes += weight.nbytes
        if self._run_bytes >= FLUSH_BYTES or len(self._run) >= FLUSH_TENSORS:
            self.flush()

    def _add_cast(self, weight: torch.Tensor, offset: int) -> None:
        """A run of cast sources covers [run start, offset) with no padding (each source starts aligned to the
        cast dtype's size, right after the one before); a pending byte run is written first."""
        cast = self.cast
        assert cast is not None
        table = self.cast_table
        if table is not None and weight.get_device() == self._device and weight.is_contiguous():
            if self._run:  # a run is one contiguous region, ending where this tensor starts
                self._flush_run()
            table.add(weight, weight.data_ptr(), offset, weight.nbytes)
            self.offset = self._run_start = offset + weight.numel() * cast.itemsize
            self._run_bytes += weight.nbytes
            if self._run_bytes >= FLUSH_BYTES or len(table) >= FLUSH_TENSORS:
                self.flush()
            return
        if self._run and not self._run_cast:
            self._flush_run()
        if not self._run:
            self._run_start = self.offset = offset
            self._run_cast = True
        if weight.device != self.buffer.device:
            self.flush()
            region = self.buffer[offset : offset + weight.numel() * cast.itemsize]
            region.view(dtype=cast).view(weight.shape).copy_(weight, non_blocking=True)
            self.offset = self._run_start = offset + region.numel()
            self._run_cast = False
            return
        self._run.append(weight.reshape(-1))
        self.offset = offset + weight.numel() * cast.itemsize
        self._run_bytes += weight.nbytes
        if self._run_bytes >= FLUSH_BYTES or len(self._run) >= FLUSH_TENSORS:
            self.flush()

    def flush(self) -> None:
        """Write the pending run and table into the bucket."""
        self._flush_run()
        for t in (self.table, self.cast_table):
            if t is not None:
                gather_copy.launch(self.buffer, t)
        self._run_bytes = 0

    def _flush_run(self) -> None:
        if self._run:
            out = self.buffer[self._run_start : self.offset]
            torch.cat(self._run, out=out.view(self.cast) if self.cast and self._run_cast else out)
        self._run, self._run_start, self._run_cast = [], self.offset, False


class Regions:
    """Where the next bucket goes: one half of the buffer, the other, or (for a tensor larger than a half)
    the whole of it. ``early``: whether the receiver may ack the current bucket on receipt."""

    def __init__(self, bucket_size: int, pipeline: bool):
        self.half = bucket_size // 2 // ALIGN * ALIGN
        self.size, self.on = bucket_size, pipeline and self.half > 0
        self.current = 0 if self.on else 2  # 0, 1: the halves; 2: the whole buffer

    def bounds(self) -> tuple[int, int]:
        return ((0, self.half), (self.half, 2 * self.half), (0, self.size))[self.current]

    def early(self) -> bool:
        return self.current != 2

    def needs_whole(self, nbytes: int) -> bool:
        return self.on and self.current != 2 and nbytes > self.half

    def after_send(self) -> None:
        # after a half: the other one (its bucket was processed before this one's ack came back); after the
        # whole buffer (acked when processed): nothing is in flight, start again at the first half
        if self.on:
            self.current = 0 if self.current == 2 else 1 - self.current


def patch_bucket_sender_fused(
    module: ModuleType,
    pipeline: bool = True,
    table: bool | None = False,
    cast: torch.dtype | None = None,
    packed: bool = False,
) -> None:
    """Give ``BucketedWeightSender`` in ``module`` (verl's bucketed_weight_transfer.py) the fused fill; idempotent.
    ``pipeline``: alternate the buffer's halves; ``table``: the table fill, ``cast``: the dtype float32 weights
    are sent as; ``packed``: the metadata as a ``PackedMeta``. Install it before
    ``sync_timing.patch_bucket_sender``, which wraps whatever send method it finds."""
    cls = module.BucketedWeightSender
    if getattr(cls, FLAG, False):
        return
    if getattr(cls, TIMING_FLAG, False):
        # this patch replaces the send method: installed after sync_timing it would drop the timing line silently
        raise RuntimeError(
            "fused_send: BucketedWeightSender is already wrapped by sync_timing; install fused_send first"
        )

    async def send(self: Any, fill: BucketFill, is_last: bool, early: bool = False) -> None:
        fill.flush()
        module.get_torch_device().synchronize()  # looked up now: sync_timing may have wrapped it
        msg = {"bucket_meta": fill.meta, "is_last": is_last}
        if fill.any_cast:  # the engine refuses cast tensors of another dtype than its own
            msg[CAST] = str(fill.cast).removeprefix("torch.")
        if early and not is_last:
            msg[EARLY_ACK] = True
        self.socket.send_pyobj(msg)
        self.socket.recv()

    @functools.wraps(cls.async_send_weights)
    async def async_send_weights(self: Any, weights: Any) -> None:
        from verl.workers.rollout.utils import ensure_async_iterator

        try:
            self._init_socket()
            self._init_buffer()
            fill = BucketFill(self.buffer, self.bucket_size, table, cast, packed)
            regions = Regions(self.bucket_size, pipeline)
            fill.reset(*regions.bounds())
            async for name, weight in ensure_async_iterator(weights):
                dtype, nbytes = fill.sent(name, weight)
                if regions.needs_whole(nbytes):
                    if fill.meta:  # acked once processed: then nothing is in flight
                        await send(self, fill, False)
                    regions.current = 2
                    fill.reset(*regions.bounds())
                fits = fill.room(dtype, nbytes)
                if not fits and fill.meta:
                    await send(self, fill, False, regions.early())
                    regions.after_send()
                    # the bucket just sent used the whole buffer (acked once processed): none in flight
                    if regions.needs_whole(nbytes):
                        regions.current = 2
                    fill.reset(*regions.bounds())
                    fits = fill.room(dtype, nbytes)
                if not fits:
                    # larger than a bucket: verl's own path (CUDA IPC of the tensor itself)
                    assert not self.use_shm, (
                        f"Weight {name}({weight.shape}, {weight.dtype}) is too large to fit in the bucket. "
                        f"Please increase rollout.update_weights_bucket_megabytes({self.bucket_size_mb} MB)."
                    )
                    self._direct_send_large_weight(name, weight)
                    continue
                fill.add(name, weight, dtype)
            name = weight = None
            await send(self, fill, True)
        finally:
            self._cleanup()

    cls.async_send_weights = async_send_weights
    setattr(cls, FLAG, True)


def install(module: ModuleType) -> None:
    """The hook table's installer: the fused fill with its two-half pipeline, the table fill where Triton and CUDA
    are, and the packed metadata; float32 weights sent as BF16 unless ``FP8SPEC_SEND_CAST_BF16=0``."""
    cast = torch.bfloat16 if SEND_CAST_BF16.read() else None
    patch_bucket_sender_fused(module, pipeline=True, table=None, cast=cast, packed=True)
