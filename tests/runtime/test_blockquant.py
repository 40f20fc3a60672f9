import math
import zlib

import pytest
import torch

from fp8spec.runtime.quantization import blockquant as bq

from ._fp8ref import check_quantization
from ._vllm_requant import block_amax, requant_ue8m0_like_engine

CASES = [  # (shape, block): aligned, ragged, tiny, tall, wide, 3-D expert stacks, non-square blocks
    ((1, 1), (128, 128)),
    ((7, 5), (128, 128)),
    ((128, 128), (128, 128)),
    ((129, 257), (128, 128)),
    ((256, 1024), (128, 128)),
    ((1000, 130), (128, 128)),
    ((3, 200, 300), (128, 128)),
    ((300, 200), (64, 128)),
    ((2, 129, 100), (64, 128)),
    ((100, 70), (32, 16)),
]
FMTS = ["fp32", "ue8m0", "ue8m0_fixed"]


def _rand(shape, gen, dtype=torch.bfloat16):
    """Random weights whose magnitude varies over ~10 decades across rows and columns."""
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    rows = torch.pow(10.0, torch.empty(shape[-2], 1, dtype=torch.float64).uniform_(-6, 4, generator=gen))
    cols = torch.pow(10.0, torch.empty(1, shape[-1], dtype=torch.float64).uniform_(-1, 1, generator=gen))
    return (x * rows * cols).to(dtype)


@pytest.mark.parametrize("shape,block", CASES)
@pytest.mark.parametrize("fmt", FMTS)
def test_quantize_within_e4m3_bound(shape, block, fmt):
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, block, fmt)).encode()))  # same seed every run
    x = _rand(shape, gen)
    q, s = bq.quantize_blockwise(x, block, fmt)
    check_quantization(x, q, s, *block, fmt)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_zero_blocks_huge_values_and_dtypes(fmt, dtype):
    gen = torch.Generator().manual_seed(7)
    x = _rand((384, 400), gen, torch.float32)
    x[:128, :128] = 0  # an all-zero block
    x[128:256, 128:256] = 1e-7  # a block under the amax floor
    big = 6e4 if dtype == torch.float16 else 3e38  # near the dtype's max
    x = x.clamp(-big, big)  # keep the random part finite in the target dtype
    x[300, 390] = big
    x[301, 391] = -big
    x = x.to(dtype)
    q, s = bq.quantize_blockwise(x, (128, 128), fmt)
    check_quantization(x, q, s, 128, 128, fmt)
    assert (q[:128, :128].to(torch.float32) == 0).all()
    floor_scale = 1e-4 / 448 if fmt == "fp32" else 2.0**-22
    assert s[0, 0].item() == pytest.approx(floor_scale, rel=1e-6)
    # the huge values come back (saturated to 448 * scale, within rounding) and stay finite
    deq = bq.dequantize_blockwise(q, s)
    assert torch.isfinite(deq).all()
    assert deq[300, 390].item() == pytest.approx(float(x[300, 390]), rel=2**-4)


def test_ue8m0_powers_of_two_and_never_below_fp32():
    gen = torch.Generator().manual_seed(3)
    for shape in [(512, 640), (130, 70), (2, 256, 384)]:
        x = _rand(shape, gen)
        _, s32 = bq.quantize_blockwise(x, scale_fmt="fp32")
        _, s8 = bq.quantize_blockwise(x, scale_fmt="ue8m0")
        mant, _ = torch.frexp(s8.double())
        assert (mant == 0.5).all()
        assert (s8 >= s32).all()
        assert (s8 < 2 * s32).all()


def test_pow2_ceil_exact_at_edges():
    t = torch.tensor([1.0, 2.0**-20, 1.0000001, 3.0, 0.75, 2.0**100, 1.5 * 2.0**-22], dtype=torch.float32)
    want = torch.tensor([1.0, 2.0**-20, 2.0, 4.0, 1.0, 2.0**100, 2.0**-21], dtype=torch.float32)
    assert torch.equal(bq.pow2_ceil(t), want)


def _engine_requant_survival(x, block):
    q, s = bq.quantize_blockwise(x, block, "ue8m0")
    q2, s2 = requant_ue8m0_like_engine(q, s, block)
    # no second rounding: every dequantized value is bit-identical
    assert torch.equal(bq.dequantize_blockwise(q, s, block), bq.dequantize_blockwise(q2, s2, block))
    # scales survive, except blocks whose largest code is exactly 224, re-expressed as (2q, s/2)
    qmax = block_amax(q.to(torch.float32), block)
    edge = qmax == 224
    assert torch.equal(s2[~edge], s[~edge])
    assert torch.equal(s2[edge], s[edge] / 2)
    return edge


@pytest.mark.parametrize("shape", [(256, 256), (300, 500), (4, 130, 260)])
@pytest.mark.parametrize("block", [(128, 128), (64, 32)])
def test_ue8m0_survives_engine_requant(shape, block):
    gen = torch.Generator().manual_seed(11)
    x = _rand(shape, gen)
    x[..., : block[0], : block[1]] = 0  # zero block survives too
    _engine_requant_survival(x, block)
    # the fixed-point rule: scales and codes survive bit for bit
    q, s = bq.quantize_blockwise(x, block, "ue8m0_fixed")
    q2, s2 = requant_ue8m0_like_engine(q, s, block)
    assert torch.equal(s2, s)
    assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8))
    # and represents the same values as the plain ue8m0 rule, except that codes which are E4M3
    # subnormals under ue8m0 may gain precision (never lose it) under the halved scale
    qc, sc = bq.quantize_blockwise(x, block, "ue8m0")
    d_fix, d_ceil = bq.dequantize_blockwise(q, s, block), bq.dequantize_blockwise(qc, sc, block)
    normal = x.double().abs() / bq.expand_scales(sc.double(), x.shape, block) >= 2.0**-6
    assert torch.equal(d_fix[normal], d_ceil[normal])
    xf = x.to(torch.float64)
    assert ((d_fix.double() - xf).abs() <= (d_ceil.double() - xf).abs())[~normal].all()


def test_edge_blocks_exist_and_fp32_scales_get_rounded_twice():
    """The 224 edge case is real (so the assertions above are exercised) and FP32 scales are not lossless."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2048, 2048, generator=gen)
    blocks = torch.pow(2.0, torch.rand(16, 1, 16, 1, generator=gen))
    x = x * blocks.repeat_interleave(128, 0).repeat_interleave(128, 2).reshape(2048, 2048)
    x = x.to(torch.bfloat16)
    edge = _engine_requant_survival(x, (128, 128))
    assert edge.any() and not edge.all()
    q, s = bq.quantize_blockwise(x, scale_fmt="fp32")
    q2, s2 = requant_ue8m0_like_engine(q, s)
    assert not torch.equal(bq.dequantize_blockwise(q, s), bq.dequantize_blockwise(q2, s2))


def test_fused_qkv_and_gate_up_on_the_engine_grid():
    gen = torch.Generator().manual_seed(2)
    q_, k_, v_ = (_rand((r, 384), gen) for r in (512, 128, 128))
    parts = bq.quantize_fused([q_, k_, v_])
    for p, (qq, ss) in zip((q_, k_, v_), parts):
        rq, rs = bq.quantize_blockwise(p)
        assert torch.equal(qq.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(ss, rs)
    # the fused result is the engine's view of the same tensor
    fq, fs = bq.quantize_fused([q_, k_, v_], split=False)
    assert torch.equal(fq.view(torch.uint8), torch.cat([p[0] for p in parts]).view(torch.uint8))
    assert torch.equal(fs, torch.cat([p[1] for p in parts]))
    # gate/up of an MoE expert stack (3-D), fused on dim -2 like vLLM's w13
    g, u = _rand((4, 256, 384), gen), _rand((4, 256, 384), gen)
    (gq, gs), (uq, us) = bq.quantize_fused([g, u])
    assert torch.equal(gs, bq.quantize_blockwise(g)[1]) and torch.equal(us, bq.quantize_blockwise(u)[1])
    # misaligned parts cannot be split into per-part scales
    with pytest.raises(ValueError, match="block grid"):
        bq.quantize_fused([_rand((100, 256), gen), _rand((100, 256), gen)])
    fq2, fs2 = bq.quantize_fused([_rand((100, 256), gen), _rand((100, 256), gen)], split=False)
    assert fs2.shape == (2, 2)


def test_fused_grid_problems():
    assert bq.fused_grid_problems([4096, 1024, 1024], 128, tp_size=8) == []
    assert bq.fused_grid_problems([4096, 1024, 1000], 128, tp_size=1) == []  # last part may be ragged
    assert bq.fused_grid_problems([4096, 512, 512], 128, tp_size=8)  # 64 rows per rank
    assert bq.fused_grid_problems([1000, 1024], 128)


def test_3d_expert_tensor_equals_per_expert():
    gen = torch.Generator().manual_seed(9)
    x = _rand((5, 200, 130), gen)
    q, s = bq.quantize_blockwise(x)
    assert s.shape == (5, 2, 2)
    for e in range(5):
        qe, se = bq.quantize_blockwise(x[e])
        assert torch.equal(q[e].view(torch.uint8), qe.view(torch.uint8)) and torch.equal(s[e], se)


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        bq.quantize_blockwise(torch.zeros(8))
    with pytest.raises(ValueError):
        bq.quantize_blockwise(torch.zeros(8, 8), scale_fmt="e5m2")
    with pytest.raises(ValueError):
        bq.quantize_blockwise(torch.zeros(8, 8, dtype=torch.int32))
    assert bq.scale_name("model.layers.0.mlp.down_proj.weight") == "model.layers.0.mlp.down_proj.weight_scale_inv"


def test_reference_matches_verl_math_when_floors_agree():
    """verl 0.9.1's torch fallback (scale = amax/448, x * (1/scale), clamp) computes the same codes."""
    gen = torch.Generator().manual_seed(4)
    x = _rand((256, 384), gen)
    q, s = bq.quantize_blockwise(x)
    # re-derived verl fallback math (verl/utils/kernel/fp8_kernel.py lines 266-309), square blocks
    xb = x.float().reshape(2, 128, 3, 128).permute(0, 2, 1, 3).reshape(2, 3, -1)
    amax = xb.abs().amax(-1, keepdim=True)
    scale = 448.0 / amax
    qv = torch.clamp(xb * scale, -448, 448).to(torch.float8_e4m3fn)
    qv = qv.reshape(2, 3, 128, 128).permute(0, 2, 1, 3).reshape(256, 384)
    # verl multiplies by 448/amax instead of 1/(amax/448): codes agree except for rare 1-ulp ties
    mism = (qv.view(torch.uint8) != q.view(torch.uint8)).float().mean().item()
    assert mism < 1e-3
    assert torch.allclose(s, (1.0 / scale).squeeze(-1), rtol=2**-22)
    assert math.isfinite(mism)
