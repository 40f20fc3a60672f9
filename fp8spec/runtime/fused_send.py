"""The trainer's bucket fill with a few copy launches per bucket instead of one per tensor (issue 23, item 3).

verl 0.9.1's ``BucketedWeightSender.async_send_weights`` (``verl/workers/rollout/vllm_rollout/
bucketed_weight_transfer.py`` 102-166) fills each bucket tensor by tensor: a slice, two views and a ``copy_`` per
tensor, one device copy launch each. For Qwen3-30B-A3B that is 18,867 launches per sync, and the instrumented
sync of BENCHMARKS.md 8.3 spent 0.67 s of 1.7 s waiting on this fill. Here the same loop places each tensor at
the offset verl would (same alignment, same bucket boundaries, same metadata: the receiver, and the direct path's
offsets cached per metadata message, see the same buckets) but gathers the tensors of a bucket into runs that one
``torch.cat(..., out=bucket_slice)`` writes (CUDA's cat copies up to 128 inputs per launch). A run is flushed
before the bucket is sent, and every ``FLUSH_BYTES`` so the tensors it holds stay bounded.

Everything around the loop stays verl's: its socket and buffer set-up (``_init_socket``, ``_init_buffer``), its
large-weight path (``_direct_send_large_weight``), its clean-up, and ``get_torch_device`` looked up in verl's
module at each call (``sync_timing`` wraps it). A tensor on another device than the bucket (an offloaded shard
going host-to-device) is copied the way verl copies it. Opt-in (``FP8SPEC_FUSED_SEND=1``, with ``direct_sync``)
until the H200 shows its time.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch

from .sync_timing import FLAG as TIMING_FLAG

FLAG = "_fp8spec_fused_send"
FLUSH_BYTES = 256 << 20  # source tensors a pending run may hold before it is written
FLUSH_TENSORS = 4096


class BucketFill:
    """One bucket being filled: verl's offsets and metadata, the copies gathered into runs."""

    def __init__(self, buffer: torch.Tensor, bucket_size: int):
        self.buffer, self.bucket_size = buffer, bucket_size
        self._zeros = torch.zeros(16, dtype=torch.uint8, device=buffer.device)  # alignment padding
        self.reset()

    def reset(self) -> None:
        self.meta: dict[str, dict] = {}
        self.offset = self._run_start = self._run_bytes = 0
        self._run: list[torch.Tensor] = []

    def fits(self, weight: torch.Tensor) -> bool:
        return self._aligned(weight) + weight.nbytes <= self.bucket_size

    def _aligned(self, weight: torch.Tensor) -> int:
        a = weight.element_size()
        return (self.offset + a - 1) // a * a

    def add(self, name: str, weight: torch.Tensor) -> None:
        """Place ``weight`` at verl's next offset (the caller checked ``fits``)."""
        offset = self._aligned(weight)
        if offset > self.offset:  # the padding belongs to the run, so a run is always [run start, offset)
            self._run.append(self._zeros[: offset - self.offset])
            self.offset = offset
        self.meta[name] = {
            "name": name,
            "shape": weight.shape,
            "dtype": weight.dtype,
            "offset": offset,
            "handle": None,
        }
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

    def flush(self) -> None:
        """Write the pending run into the bucket."""
        if self._run:
            torch.cat(self._run, out=self.buffer[self._run_start : self.offset])
        self._run, self._run_start, self._run_bytes = [], self.offset, 0


def patch_bucket_sender_fused(module: ModuleType) -> None:
    """Give ``BucketedWeightSender`` in ``module`` (verl's bucketed_weight_transfer.py) the fused fill; idempotent.
    Install it before ``sync_timing.patch_bucket_sender``, which wraps whatever send method it finds."""
    cls = module.BucketedWeightSender
    if getattr(cls, FLAG, False):
        return
    if getattr(cls, TIMING_FLAG, False):
        # this patch replaces the send method: installed after sync_timing it would drop the timing line silently
        raise RuntimeError(
            "fused_send: BucketedWeightSender is already wrapped by sync_timing; install fused_send first"
        )

    async def send(self: Any, fill: BucketFill, is_last: bool) -> None:
        fill.flush()
        module.get_torch_device().synchronize()  # looked up now: sync_timing may have wrapped it
        self.socket.send_pyobj({"bucket_meta": fill.meta, "is_last": is_last})
        self.socket.recv()

    @functools.wraps(cls.async_send_weights)
    async def async_send_weights(self: Any, weights: Any) -> None:
        from verl.workers.rollout.utils import ensure_async_iterator

        try:
            self._init_socket()
            self._init_buffer()
            fill = BucketFill(self.buffer, self.bucket_size)
            async for name, weight in ensure_async_iterator(weights):
                if not fill.fits(weight) and fill.meta:
                    await send(self, fill, False)
                    fill.reset()
                if not fill.fits(weight):
                    # larger than a bucket: verl's own path (CUDA IPC of the tensor itself)
                    assert not self.use_shm, (
                        f"Weight {name}({weight.shape}, {weight.dtype}) is too large to fit in the bucket. "
                        f"Please increase rollout.update_weights_bucket_megabytes({self.bucket_size_mb} MB)."
                    )
                    self._direct_send_large_weight(name, weight)
                    continue
                fill.add(name, weight)
            name = weight = None
            await send(self, fill, True)
        finally:
            self._cleanup()

    cls.async_send_weights = async_send_weights
    setattr(cls, FLAG, True)
