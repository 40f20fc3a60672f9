"""float64 oracle helpers for the FP8 tests (independent of the code under test)."""

import math

import torch

E4M3_MAX = 448.0


def e4m3_half_ulp(mag: torch.Tensor) -> torch.Tensor:
    """Half the spacing of E4M3 values at magnitude ``mag`` (float64), subnormals included."""
    mag = mag.abs().to(torch.float64)
    e = torch.floor(torch.log2(torch.clamp(mag, min=2.0**-6)))
    ulp = torch.where(mag < 2.0**-6, torch.full_like(mag, 2.0**-9), torch.pow(2.0, e - 3))
    return ulp / 2


def block_amax64(x: torch.Tensor, bm: int, bn: int) -> torch.Tensor:
    """float64 per-block max|x| of (..., M, N), computed with explicit loops over the block grid."""
    x = x.to(torch.float64)
    *lead, m, n = x.shape
    gm, gn = math.ceil(m / bm), math.ceil(n / bn)
    out = torch.zeros(*lead, gm, gn, dtype=torch.float64)
    for i in range(gm):
        for j in range(gn):
            blk = x[..., i * bm : (i + 1) * bm, j * bn : (j + 1) * bn]
            out[..., i, j] = blk.abs().amax(dim=(-2, -1))
    return out


def expand64(s: torch.Tensor, m: int, n: int, bm: int, bn: int) -> torch.Tensor:
    s = s.to(torch.float64)
    return s.repeat_interleave(bm, dim=-2).repeat_interleave(bn, dim=-1)[..., :m, :n]


def check_quantization(x, q, s, bm, bn, scale_fmt, floor=1e-4):
    """Assert q/s is a valid E4M3 blockwise quantization of x within the format's rounding bound."""
    m, n = x.shape[-2:]
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    gm, gn = math.ceil(m / bm), math.ceil(n / bn)
    assert s.dtype == torch.float32 and s.shape == (*x.shape[:-2], gm, gn)
    qf = q.to(torch.float64)
    assert torch.isfinite(qf).all(), "NaN/inf in quantized weight"
    assert (qf.abs() <= E4M3_MAX).all()
    s64 = s.to(torch.float64)
    assert torch.isfinite(s64).all() and (s64 > 0).all()
    amax = block_amax64(x, bm, bn)
    ref = torch.clamp(amax, min=floor) / E4M3_MAX  # exact fp32-style scale in float64
    if scale_fmt == "fp32":
        assert torch.allclose(s64, ref, rtol=2**-23, atol=0)
    else:
        mant, _ = torch.frexp(s64)
        assert (mant == 0.5).all(), "UE8M0 scale is not a power of two"
        if scale_fmt == "ue8m0":
            assert (s64 >= ref * (1 - 2**-23)).all() and (s64 < 2 * ref * (1 + 2**-23)).all()
        else:  # ue8m0_fixed
            assert (s64 >= ref * (E4M3_MAX / 464) * (1 - 2**-23)).all() and (s64 < 2 * ref * (1 + 2**-23)).all()
    se = expand64(s, m, n, bm, bn)
    x64 = x.to(torch.float64)
    y = x64 / se
    deq = qf * se
    bound = se * (e4m3_half_ulp(torch.maximum(y.abs(), qf.abs())) + y.abs() * 2.0**-21)
    err = (deq - x64).abs()
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} elements outside the E4M3 bound; worst excess {float((err - bound).max())}"
    # sign is kept (zero may come out as +-0)
    nz = qf != 0
    assert (torch.sign(qf[nz]) == torch.sign(x64[nz])).all()
