"""vLLM's E8M0 re-quantization, re-derived from its documented math for the tests (not shipped in a bundle)."""

from collections.abc import Sequence

import torch

from fp8spec.runtime.quantization.blockquant import (
    DEFAULT_BLOCK,
    FP8_DTYPE,
    FP8_MAX,
    _check_args,
    _pad_view,
    dequantize_blockwise,
)


def block_amax(x: torch.Tensor, block: Sequence[int] = DEFAULT_BLOCK) -> torch.Tensor:
    """float32 per-block max |x|, shape (..., ceil(M/bm), ceil(N/bn))."""
    bm, bn = _check_args(x, block, "fp32")
    xv, (lead, m, n, gm, gn, L) = _pad_view(x, bm, bn)
    return xv.abs().amax(dim=(2, 4)).reshape(*lead, gm, gn)


def requant_ue8m0_like_engine(
    q: torch.Tensor, scale_inv: torch.Tensor, block: Sequence[int] = DEFAULT_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """What vLLM's ``requant_weight_ue8m0_inplace`` does to a pushed block-FP8 weight, re-derived.

    Dequantize with the given scales in float32, then quantize again with power-of-two scales computed
    the way vLLM's ``_ceil_to_ue8m0`` does (``2 ** ceil(log2(amax / 448))`` through ``torch.log2``, amax
    floored at 1e-4, ``x * (1 / sf)``, no clamp). Written here from the
    documented math, not copied.
    """
    deq = dequantize_blockwise(q, scale_inv, block)
    bm, bn = int(block[0]), int(block[1])
    xv, (lead, m, n, gm, gn, L) = _pad_view(deq, bm, bn)
    amax = xv.abs().amax(dim=(2, 4), keepdim=True).clamp(1e-4)
    sf = torch.pow(2.0, torch.ceil(torch.log2(amax / FP8_MAX)))
    q2 = (xv * (1.0 / sf)).to(FP8_DTYPE)
    q2 = q2.view(L, gm * bm, gn * bn)[:, :m, :n].reshape(*lead, m, n).contiguous()
    return q2, sf.reshape(*lead, gm, gn).contiguous()
