"""The table copy of fp8spec/runtime/weight_sync/sender/gather_copy.py: the table and its chunks on the CPU (through the reference
reading), the Triton kernel against the reference on the GPU (skipped here: CI has no GPU)."""

from __future__ import annotations

import pytest
import torch

from fp8spec.runtime.weight_sync.sender import gather_copy as gc


def _tensors(seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    sizes = [16, 4096, gc.CHUNK - 16, gc.CHUNK, gc.CHUNK + 16, 3 * gc.CHUNK + 48, 32, 2 * gc.CHUNK]
    return [torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).to(device) for n in sizes]


def _fill(buffer, tensors, gap=32, at=64):
    """Put every tensor in a table at 16-byte offsets with gaps between them; returns the offsets."""
    table, offsets = gc.CopyTable(), []
    for t in tensors:
        assert gc.fits(t.data_ptr(), at, t.nbytes)
        table.add(t, t.data_ptr(), at, t.nbytes)
        offsets.append(at)
        at += t.nbytes + gap
    return table, offsets


def test_fits_only_16_byte_words():
    assert gc.fits(1024, 16, 32)
    assert not gc.fits(1024 + 8, 16, 32) and not gc.fits(1024, 8, 32) and not gc.fits(1024, 16, 24)
    assert not gc.fits(1024, 16, 0)


def test_the_table_numbers_each_tensors_chunks():
    tensors = _tensors()
    table, offsets = _fill(torch.empty(0, dtype=torch.uint8), tensors)
    rows = table.rows()
    assert rows.dtype == torch.int64 and tuple(rows.shape) == (4, len(tensors))
    assert rows[0].tolist() == [t.data_ptr() for t in tensors]
    assert rows[1].tolist() == offsets and rows[2].tolist() == [t.nbytes for t in tensors]
    assert tuple(gc.CopyTable().rows().shape) == (4, 0)
    per = [-(-t.nbytes // gc.CHUNK) for t in tensors]
    assert per == [1, 1, 1, 1, 2, 4, 1, 2]
    assert rows[3].tolist() == [sum(per[:i]) for i in range(len(per))] and table.chunks == sum(per)


def test_the_reference_copies_every_chunk_and_leaves_the_gaps():
    tensors = _tensors(1)
    buffer = torch.full((sum(t.nbytes + 32 for t in tensors) + 128,), 0xA5, dtype=torch.uint8)
    table, offsets = _fill(buffer, tensors)
    gc.launch(buffer, table)
    assert len(table) == 0 and table.chunks == 0  # cleared after the launch
    for t, o in zip(tensors, offsets):
        assert torch.equal(buffer[o : o + t.nbytes], t)
        assert torch.all(buffer[o + t.nbytes : o + t.nbytes + 32] == 0xA5)  # the gap after it untouched
    assert torch.all(buffer[:64] == 0xA5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_kernel_equals_the_reference():
    assert gc.get_kernel() is not None, gc._kernel_error
    tensors = _tensors(2, "cuda")
    # and thousands of small ones in the same table (the kernel's binary search over their first chunks)
    g = torch.Generator(device="cuda").manual_seed(3)
    tensors += [
        torch.randn(8 * (1 + i % 9), device="cuda", generator=g).to(torch.bfloat16) for i in range(5000)
    ]
    size = sum(t.nbytes + 32 for t in tensors) + 128
    got = torch.full((size,), 0xA5, dtype=torch.uint8, device="cuda")
    table, offsets = _fill(got, tensors)
    gc.launch(got, table)
    want = torch.full((size,), 0xA5, dtype=torch.uint8)
    ref, _ = _fill(want, [t.cpu() for t in tensors])
    gc._reference(want, ref)
    torch.cuda.synchronize()
    assert torch.equal(got.cpu(), want)


def _floats(seed=0, device="cpu"):
    """float32 sources across chunk edges, odd element counts, and values whose BF16 rounding ties or carries."""
    g = torch.Generator().manual_seed(seed)
    per_chunk = gc.CHUNK // 4
    sizes = [1, 3, 4097, per_chunk - 1, per_chunk, per_chunk + 5, 3 * per_chunk + 7]
    ts = [torch.randn(n, generator=g) for n in sizes]
    ts.append(torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 2 - 2**-9, -(1 + 2**-8), 3.0e38, float("inf"), -0.0]))
    return [t.to(device) for t in ts]


def _fill_cast(buffer, tensors, gap=6):
    """A cast table: each float32 tensor to a 2-byte aligned offset of ``buffer`` as BF16, gaps between them."""
    table, offsets, at = gc.CopyTable(torch.bfloat16), [], 2
    for t in tensors:
        table.add(t, t.data_ptr(), at, t.nbytes)
        offsets.append(at)
        at += t.numel() * 2 + gap
    return table, offsets, at


def test_a_cast_table_writes_torchs_bf16_rounding_and_leaves_the_gaps():
    tensors = _floats(4)
    _, _, size = _fill_cast(torch.empty(0, dtype=torch.uint8), tensors)
    buffer = torch.full((size + 8,), 0xA5, dtype=torch.uint8)
    table, offsets, _ = _fill_cast(buffer, tensors)
    assert table.chunks == sum(-(-t.nbytes // gc.CHUNK) for t in tensors)  # chunks of source bytes
    gc.launch(buffer, table)
    for t, o in zip(tensors, offsets):
        assert torch.equal(buffer[o : o + t.numel() * 2], t.to(torch.bfloat16).view(torch.uint8))
        assert torch.all(buffer[o + t.numel() * 2 : o + t.numel() * 2 + 6] == 0xA5)
    assert torch.all(buffer[:2] == 0xA5)


def test_a_copy_table_casts_to_bf16_only():
    with pytest.raises(ValueError, match="bfloat16 only"):
        gc.CopyTable(torch.float16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_cast_kernel_equals_torchs_cast():
    assert gc.get_kernel() is not None, gc._kernel_error
    g = torch.Generator(device="cuda").manual_seed(5)
    tensors = _floats(6, "cuda") + [torch.randn(1 + i % 37, device="cuda", generator=g) for i in range(5000)]
    _, _, size = _fill_cast(torch.empty(0, dtype=torch.uint8), tensors)
    got = torch.full((size + 8,), 0xA5, dtype=torch.uint8, device="cuda")
    table, offsets, _ = _fill_cast(got, tensors)
    gc.launch(got, table)
    want = torch.full((size + 8,), 0xA5, dtype=torch.uint8)
    for t, o in zip(tensors, offsets):
        want[o : o + t.numel() * 2] = t.cpu().to(torch.bfloat16).view(torch.uint8)
    torch.cuda.synchronize()
    assert torch.equal(got.cpu(), want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_tables_queued_behind_a_busy_stream_are_not_overwritten_before_their_copy():
    # the host side runs ahead of a stream held busy: each launch's table (read from host memory the next launch
    # may reuse) must reach the GPU intact
    assert gc.get_kernel() is not None, gc._kernel_error
    g = torch.Generator(device="cuda").manual_seed(7)
    groups = [[torch.randn(4 * (1 + (i + k) % 5), device="cuda", generator=g) for i in range(40)] for k in range(64)]
    size = sum(t.nbytes + 32 for grp in groups for t in grp) + 128
    got = torch.full((size,), 0xA5, dtype=torch.uint8, device="cuda")
    torch.cuda._sleep(200_000_000)  # keeps the stream busy while the host queues every launch
    at, placed = 64, []
    for grp in groups:
        table, offsets = _fill(got, grp, at=at)
        placed.append((grp, offsets))
        at = offsets[-1] + grp[-1].nbytes + 32
        gc.launch(got, table)
    torch.cuda.synchronize()
    for grp, offsets in placed:
        for t, o in zip(grp, offsets):
            assert torch.equal(got[o : o + t.nbytes], t.view(torch.uint8))
