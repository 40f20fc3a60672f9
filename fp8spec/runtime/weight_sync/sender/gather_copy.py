"""Many tensors copied into one byte buffer by one launch, from a table of their addresses.

The trainer's bucket fill (``fused_send``) gathered each run of tensors with ``torch.cat(..., out=...)``, which
needs a flat byte view of every source (``reshape(-1).view(torch.uint8)``: two tensor ops, about half the fill's
per-tensor host cost, docs/results.md#weight-sync) and whose CUDA kernel takes at most 128 inputs per launch. Here a tensor
costs four integers in a table (its address, its offset in the buffer, its size, its first chunk) and a reference
kept until the launch; one Triton launch copies every tensor of the table, each program one ``CHUNK`` of one
tensor, found by a binary search over the tensors' first chunks.

Only what the kernel can copy in 16-byte words goes in a table: a contiguous tensor whose address, size and
offset are multiples of 16 bytes (every BF16 / float32 weight matrix and vector of Qwen3's shapes is; verl's
offsets are aligned to the element size only, so an odd-sized tensor can shift the ones after it). The rest take
the caller's other path. Without CUDA or Triton ``launch`` copies chunk by chunk through the kept tensors: the
same table, read the same way (the CPU tests' reference, not a fast path).

A cast table (``CopyTable(cast=torch.bfloat16)``) holds float32 sources written as BF16: its sizes and chunks
count source bytes, its offsets the destination's; the kernel rounds to nearest even, as torch's cast does, so
a bucket filled by the sender's cast (``fused_send``) holds what verl's receiver would have cast. It costs no
alignment beyond the dtypes' own, and one launch for all its tensors where a gathered ``torch.cat`` into a BF16
view copies tensor by tensor (CUDA's batched cat needs one dtype in and out).
"""

from __future__ import annotations

import bisect
from array import array
from typing import Any

import torch

CHUNK = 256 << 10  # bytes one program copies
ALIGN = 16  # the kernel's word: four int32 lanes
WORDS = 4096  # int32 words per inner step of a program
SEARCH_STEPS = 16
MAX_TENSORS = 1 << SEARCH_STEPS  # the binary search covers this many tensors per launch

# this process's launches and the tensors they copied (the probe and the tests read them)
STATS = {"launches": 0, "tensors": 0}

_kernel: Any = None
_kernel_error: Exception | None = None


def fits(ptr: int, offset: int, nbytes: int) -> bool:
    """Whether a contiguous tensor at ``ptr`` of ``nbytes`` can go to ``offset`` through a table."""
    return not ((ptr | offset | nbytes) & (ALIGN - 1)) and nbytes > 0


class CopyTable:
    """Pending copies into one buffer: per tensor its address, destination offset, size and first chunk, and the
    tensor itself (alive until launched; the caching allocator orders any later reuse after the launch)."""

    __slots__ = ("addr", "cast", "chunks", "first", "keep", "offset", "size")

    def __init__(self, cast: torch.dtype | None = None) -> None:
        if cast not in (None, torch.bfloat16):
            raise ValueError(f"a copy table casts float32 to bfloat16 only, not to {cast}")
        self.cast = cast
        self.clear()

    def clear(self) -> None:
        self.addr: list[int] = []
        self.offset: list[int] = []
        self.size: list[int] = []
        self.first: list[int] = []
        self.keep: list[torch.Tensor] = []
        self.chunks = 0

    def __len__(self) -> int:
        return len(self.keep)

    def add(self, tensor: torch.Tensor, ptr: int, offset: int, nbytes: int) -> None:
        self.addr.append(ptr)
        self.offset.append(offset)
        self.size.append(nbytes)
        self.first.append(self.chunks)
        self.keep.append(tensor)
        self.chunks += -(-nbytes // CHUNK)

    def rows(self) -> torch.Tensor:
        """The table the kernel reads: int64 ``[4, n]`` (address, offset, size, first chunk), on the CPU."""
        if not self.keep:  # frombuffer refuses an empty buffer
            return torch.empty((4, 0), dtype=torch.int64)
        # one int64 array handed over as bytes: a third of torch.tensor's time on the nested lists (a list append
        # per tensor stays cheaper than an array's, docs/results.md#weight-sync)
        flat = array("q", self.addr + self.offset + self.size + self.first)
        return torch.frombuffer(flat, dtype=torch.int64).view(4, -1)


def launch(buffer: torch.Tensor, table: CopyTable) -> None:
    """Copy every tensor of ``table`` into the uint8 ``buffer`` at its offset, then clear the table."""
    if not len(table):
        return
    STATS["launches"] += 1
    STATS["tensors"] += len(table)
    kernel = get_kernel() if buffer.is_cuda else None
    if kernel is None:
        _reference(buffer, table)
    else:
        # from pageable memory: staging the table in pinned memory was measured slower (docs/results.md#weight-sync)
        rows = table.rows().to(buffer.device, non_blocking=True)
        copy, cast = kernel
        if table.cast is None:
            copy[(table.chunks,)](
                rows,
                len(table),
                buffer.view(torch.int32),
                CHUNK_WORDS=CHUNK // 4,
                WORDS=WORDS,
                STEPS=SEARCH_STEPS,
                num_warps=4,
            )
        else:
            cast[(table.chunks,)](
                rows,
                len(table),
                buffer.view(table.cast),
                CHUNK_ELEMS=CHUNK // 4,
                ELEMS=WORDS,
                STEPS=SEARCH_STEPS,
                num_warps=4,
            )
    table.clear()


def _reference(buffer: torch.Tensor, table: CopyTable) -> None:
    """The kernel's reading of the table, chunk by chunk, through the kept tensors instead of raw addresses."""
    first = table.first
    for pid in range(table.chunks):
        t = bisect.bisect_right(first, pid) - 1  # the last tensor starting at or before this chunk
        start = (pid - first[t]) * CHUNK
        length = min(CHUNK, table.size[t] - start)
        src = table.keep[t].reshape(-1).view(torch.uint8)
        assert src.data_ptr() == table.addr[t] and src.numel() == table.size[t]
        if table.cast is None:
            dst = table.offset[t] + start
            buffer[dst : dst + length].copy_(src[start : start + length])
        else:  # source bytes -> float32 elements -> the cast dtype's bytes at the destination
            part = src[start : start + length].view(torch.float32)
            dst = table.offset[t] + start // 4 * table.cast.itemsize
            buffer[dst : dst + part.numel() * table.cast.itemsize].view(table.cast).copy_(part)


def get_kernel() -> Any:
    """The Triton kernels (the copy, the cast), or None where Triton or CUDA is missing (built once per process)."""
    global _kernel, _kernel_error
    if _kernel is not None or _kernel_error is not None:
        return _kernel
    try:
        import triton
        import triton.language as tl

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
    except Exception as e:  # pragma: no cover - depends on the image
        _kernel_error = e
        return None

    @triton.jit
    def table_row(rows, n, pid, STEPS: tl.constexpr):
        # the last tensor whose first chunk is <= pid (first chunks ascend; tensor 0 starts at chunk 0)
        first = rows + 3 * n
        pos = pid * 0
        for i in tl.static_range(STEPS):
            cand = pos + (1 << (STEPS - 1 - i))
            f = tl.load(first + cand, mask=cand < n, other=pid + 1)
            pos = tl.where(f <= pid, cand, pos)
        return pos, pid - tl.load(first + pos)

    @triton.jit
    def gather_copy(rows, n, dst, CHUNK_WORDS: tl.constexpr, WORDS: tl.constexpr, STEPS: tl.constexpr):
        pos, chunk = table_row(rows, n, tl.program_id(0).to(tl.int64), STEPS)
        start = chunk * CHUNK_WORDS  # in words
        size = tl.load(rows + 2 * n + pos) // 4
        nwords = tl.multiple_of(tl.minimum(size - start, CHUNK_WORDS), 4)
        src = tl.multiple_of(tl.load(rows + pos) + start * 4, 16).to(tl.pointer_type(tl.int32))
        out = dst + tl.multiple_of(tl.load(rows + n + pos) // 4 + start, 4)
        for w in range(0, nwords, WORDS):
            o = w + tl.arange(0, WORDS)
            m = o < nwords
            tl.store(out + o, tl.load(src + o, mask=m), mask=m)

    @triton.jit
    def gather_cast(rows, n, dst, CHUNK_ELEMS: tl.constexpr, ELEMS: tl.constexpr, STEPS: tl.constexpr):
        # the copy's table read, with float32 sources (sizes in source bytes) and destination offsets in bytes
        pos, chunk = table_row(rows, n, tl.program_id(0).to(tl.int64), STEPS)
        start = chunk * CHUNK_ELEMS
        nelems = tl.minimum(tl.load(rows + 2 * n + pos) // 4 - start, CHUNK_ELEMS)
        src = (tl.load(rows + pos) + start * 4).to(tl.pointer_type(tl.float32))
        out = dst + tl.load(rows + n + pos) // 2 + start
        for e in range(0, nelems, ELEMS):
            o = e + tl.arange(0, ELEMS)
            m = o < nelems
            tl.store(out + o, tl.load(src + o, mask=m).to(tl.bfloat16, fp_downcast_rounding="rtne"), mask=m)

    _kernel = (gather_copy, gather_cast)
    return _kernel
