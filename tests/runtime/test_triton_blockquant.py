import zlib

import pytest
import torch

from fp8spec.runtime.quantization import blockquant as bq
from fp8spec.runtime.quantization import triton_blockquant as tbq

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _bucket(gen, device="cpu"):
    shapes = [(1, 1), (7, 5), (128, 128), (129, 257), (640, 384), (3, 200, 300), (1000, 130), (4, 256, 128)]
    out = []
    for _i, s in enumerate(shapes):
        x = torch.randn(s, generator=gen) * torch.pow(
            10.0, torch.empty(s[-2], 1).uniform_(-5, 3, generator=gen)
        )
        out.append(x.to(torch.bfloat16).to(device))
    out[2][:] = 0  # an all-zero tensor
    return out


def _same(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_reference_fallback_on_cpu():
    gen = torch.Generator().manual_seed(0)
    ts = _bucket(gen)
    for fmt in ("fp32", "ue8m0", "ue8m0_fixed"):
        res = tbq.quantize_bucket(ts, scale_fmt=fmt)
        for t, (q, s) in zip(ts, res):
            rq, rs = bq.quantize_blockwise(t, scale_fmt=fmt)
            assert _same(q, rq) and torch.equal(s, rs)
    with pytest.raises(ValueError):
        tbq.quantize_bucket(ts, scale_fmt="nope")
    assert tbq.quantize_bucket([]) == []


def test_plan_tables():
    plan = tbq.BucketPlan([(300, 200), (2, 129, 100), (7, 5)], (128, 128), "cpu")
    m = plan.meta_cpu
    assert plan.n_tiles == 6 + 2 * 2 + 1
    assert m[:, 1].tolist() == [0, 60000, 60000 + 129 * 100, 60000 + 2 * 129 * 100]  # output offsets
    assert m[:, 2].tolist() == [0, 6, 8, 10]  # scale offsets
    assert m[:, 7].tolist() == [0, 6, 8, 10]  # first tile of each matrix
    assert plan.tile2mat.tolist() == [0] * 6 + [1, 1, 2, 2, 3]
    flat = tbq.make_flat_plan([(300, 200), (2, 129, 100)], [0, 60000], device="cpu")
    assert flat.meta_dev[:, 0].tolist() == [0, 60000, 60000 + 129 * 100]


def test_output_views_match_kernel_store_offsets():
    """plan.outputs() must hand out exactly the memory the kernel writes for each tensor."""
    shapes = [(128, 256), (3, 128, 128), (130, 256), (7, 5), (64, 128)]
    plan = tbq.BucketPlan(shapes, (128, 128), "cpu")
    y = torch.zeros(plan.y_total, dtype=torch.float8_e4m3fn)
    s = torch.zeros(plan.s_total, dtype=torch.float32)
    outs = plan.outputs(y, s)
    first = {}
    for row, t in enumerate(plan.mat_tensor.tolist()):
        first.setdefault(t, row)
    covered_y = torch.zeros(plan.y_total, dtype=torch.int32)
    for i, (shp, (q, sc)) in enumerate(zip(shapes, outs)):
        assert tuple(q.shape) == shp and q.is_contiguous() and sc.is_contiguous()
        assert tuple(sc.shape) == (*shp[:-2], -(-shp[-2] // 128), -(-shp[-1] // 128))
        assert q.data_ptr() - y.data_ptr() == plan.meta_cpu[first[i], 1].item()
        assert (sc.data_ptr() - s.data_ptr()) // 4 == plan.meta_cpu[first[i], 2].item()
        o = q.data_ptr() - y.data_ptr()
        covered_y[o : o + q.numel()] += 1
    assert (covered_y == 1).all()  # every output element belongs to exactly one tensor


def test_flat_reference_fallback_on_cpu():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(300, 200, generator=gen), torch.randn(2, 129, 100, generator=gen)
    flat = torch.cat([a.reshape(-1), b.reshape(-1)]).bfloat16()
    plan = tbq.make_flat_plan([a.shape, b.shape], [0, a.numel()], device="cpu")
    (qa, sa), (qb, sb) = tbq.quantize_flat(flat, plan)
    assert _same(qa, bq.quantize_blockwise(a.bfloat16())[0]) and torch.equal(
        sb, bq.quantize_blockwise(b.bfloat16())[1]
    )


def _rounding_cases(gen, n):
    """float32 values where rounding to bf16 / fp16 is delicate: halfway ties (both parities), just off them,
    bf16 / fp16 subnormals, values past fp16's range, signed zeros; then random magnitudes."""
    # bf16 1.0, its next two (odd, even mantissa), the last before 2.0 (rounding up carries into the exponent);
    # then the 16 bits below each: a tie, just under and over it, exact, all ones
    bits = [
        (hi << 16) + low
        for hi in (0x3F80, 0x3F81, 0x3F82, 0x3FFF)
        for low in (0x8000, 0x7FFF, 0x8001, 0, 0xFFFF)
    ]
    edge = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    edge = torch.cat(
        [edge, -edge, edge * 1e-39, edge * 3e-8, edge * 7e4, torch.tensor([0.0, -0.0, 65504.0, 65520.0])]
    )
    x = torch.randn(n, generator=gen) * torch.pow(10.0, torch.empty(n).uniform_(-8, 6, generator=gen))
    x[: edge.numel()] = edge
    return x


@pytest.mark.parametrize("round_to", [torch.bfloat16, torch.float16])
def test_round_to_quantizes_as_the_cast_input_on_cpu(round_to):
    gen = torch.Generator().manual_seed(11)
    shapes = [(300, 200), (2, 129, 100)]
    n = sum(torch.Size(s).numel() for s in shapes)
    flat = _rounding_cases(gen, n)
    plan = tbq.make_flat_plan(shapes, [0, 300 * 200], device="cpu")
    got = tbq.quantize_flat(flat, plan, round_to=round_to)
    want = tbq.quantize_flat(flat.to(round_to), plan)
    unrounded = tbq.quantize_flat(flat, plan)
    assert all(_same(q, rq) and torch.equal(s, rs) for (q, s), (rq, rs) in zip(got, want))
    assert not all(_same(q, rq) for (q, _), (rq, _) in zip(got, unrounded))  # the rounding is seen
    # rounding is only from float32, to bf16 / fp16; to the input's own dtype it is no rounding
    with pytest.raises(ValueError, match="only float32 inputs round"):
        tbq.quantize_flat(flat.to(round_to), plan, round_to=torch.float32)
    with pytest.raises(ValueError, match="only float32 inputs round"):
        tbq.quantize_flat(flat, plan, round_to=torch.float64)
    same = tbq.quantize_flat(flat.to(round_to), plan, round_to=round_to)
    assert all(_same(q, rq) for (q, _), (rq, _) in zip(same, want))


def _poison_allocator(nbytes):
    """Fill the caching allocator's free memory with 0xFF (NaN in e4m3fn / fp32) so unwritten outputs show."""
    p = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    p.fill_(0xFF)
    del p


@gpu
@needs_cuda
@pytest.mark.parametrize("fmt", ["fp32", "ue8m0", "ue8m0_fixed"])
@pytest.mark.parametrize("block", [(128, 128), (64, 128), (32, 16)])
def test_triton_bucket_bit_identical(fmt, block):
    if not tbq.triton_available():
        pytest.skip("triton not available")
    gen = torch.Generator().manual_seed(zlib.crc32(repr((fmt, block)).encode()))  # same seed every run
    for _trial in range(3):  # fresh inputs each time
        ts = _bucket(gen, "cuda")
        ts.append(torch.randn(512, 1024, generator=gen).to("cuda", torch.bfloat16)[:, 3:771])  # strided rows
        ts.append(torch.randn(300, 257, generator=gen).to("cuda", torch.float16))  # second dtype group
        ts.append((torch.randn(130, 250, generator=gen) * 1e30).to("cuda", torch.float32))  # huge values
        _poison_allocator(1 << 26)
        res = tbq.quantize_bucket(ts, block=block, scale_fmt=fmt, backend="triton")
        torch.cuda.synchronize()
        for t, (q, s) in zip(ts, res):
            rq, rs = bq.quantize_blockwise(t, block, fmt)
            assert q.shape == t.shape and s.shape == rs.shape
            assert _same(q, rq), (t.shape, fmt, block)
            assert torch.equal(s, rs)
            assert not torch.isnan(q.float()).any()


@gpu
@needs_cuda
def test_triton_flat_bit_identical():
    if not tbq.triton_available():
        pytest.skip("triton not available")
    gen = torch.Generator().manual_seed(5)
    shapes = [(4096, 512), (3, 768, 256), (1000, 130)]
    parts = [torch.randn(s, generator=gen).bfloat16() for s in shapes]
    offs, o = [], 0
    for p in parts:
        offs.append(o)
        o += p.numel()
    flat = torch.cat([p.reshape(-1) for p in parts]).cuda()
    plan = tbq.make_flat_plan(shapes, offs, device="cuda")
    for fmt in ("fp32", "ue8m0"):
        _poison_allocator(1 << 24)
        res = tbq.quantize_flat(flat, plan, scale_fmt=fmt)
        for p, (q, s) in zip(parts, res):
            rq, rs = bq.quantize_blockwise(p.cuda(), scale_fmt=fmt)
            assert _same(q, rq) and torch.equal(s, rs)


@gpu
@needs_cuda
@pytest.mark.parametrize("round_to", [torch.bfloat16, torch.float16])
def test_triton_rounds_float32_as_torch_casts(round_to):
    # the direct path's float32 buckets: the kernel rounds as it loads; it must give the bytes of quantizing
    # torch's cast (the engine's v.to(dtype)), ties and subnormals included
    if not tbq.triton_available():
        pytest.skip("triton not available")
    gen = torch.Generator().manual_seed(12)
    shapes = [(4096, 512), (3, 768, 256), (1000, 130)]
    offs, o = [], 0
    for sh in shapes:
        offs.append(o)
        o += torch.Size(sh).numel()
    flat = _rounding_cases(gen, o).cuda()
    plan = tbq.make_flat_plan(shapes, offs, device="cuda")
    # and the CPU reference, where the rounded input is finite (a block holding an infinity, fp16's overflow,
    # quantizes differently on the CPU and the GPU: not a rounding question)
    finite = flat.clamp(-6e4, 6e4)
    cpu_plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    for fmt in ("fp32", "ue8m0"):
        _poison_allocator(1 << 26)
        got = tbq.quantize_flat(flat, plan, scale_fmt=fmt, round_to=round_to)
        want = tbq.quantize_flat(flat.to(round_to), plan, scale_fmt=fmt)
        for (q, s), (wq, ws) in zip(got, want):
            assert _same(q, wq) and torch.equal(s, ws)
        got = tbq.quantize_flat(finite, plan, scale_fmt=fmt, round_to=round_to)
        ref = tbq.quantize_flat(finite.cpu(), cpu_plan, fmt, round_to=round_to)
        for (q, s), (rq, rs) in zip(got, ref):
            assert _same(q.cpu(), rq) and torch.equal(s.cpu(), rs)


@gpu
@needs_cuda
def test_reference_same_on_cpu_and_cuda():
    gen = torch.Generator().manual_seed(6)
    x = (torch.randn(777, 555, generator=gen) * 3).bfloat16()
    for fmt in ("fp32", "ue8m0"):
        qc, sc = bq.quantize_blockwise(x, scale_fmt=fmt)
        qg, sg = bq.quantize_blockwise(x.cuda(), scale_fmt=fmt)
        assert _same(qc, qg.cpu()) and torch.equal(sc, sg.cpu())
