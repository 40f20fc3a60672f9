"""Blockwise FP8 (E4M3) weight quantization: the torch reference.

This is the definition every other path (the bucketed Triton kernel in
``triton_blockquant``) must reproduce bit for bit. It runs on CPU or CUDA.

Math, per ``block_m x block_n`` block of the last two dimensions (leading
dimensions, e.g. MoE experts, are independent matrices)::

    amax  = max(|x|) over the block, computed in float32, floored at ``amax_floor``
    scale = amax / 448                      (scale_fmt="fp32"; IEEE division, see ``_div``)
    scale = 2 ** ceil(log2(amax / 448))     (scale_fmt="ue8m0", exact, via the float32 bit pattern)
    scale = the same, halved where the block max would quantize to 224 (scale_fmt="ue8m0_fixed",
            a fixed point of vLLM's E8M0 re-quantization; see ``compute_scales``)
    q     = e4m3( clamp(x * (1 / scale), -448, 448) )
    x    ~= q * scale                        (the engine's ``weight_scale_inv``)

Why these exact choices (engine sources read for this, paths relative to the wheel root):

* ``amax_floor=1e-4`` and ``x * (1.0 / sf)`` are what vLLM's own block quantizer does
  (``vllm/utils/deep_gemm.py::per_block_cast_to_fp8``: vLLM 0.24.0 line 662, 0.33.0 line 1027;
  ``.clamp(1e-4)`` on the amax, ``sf = x_amax / fp8_max``, ``x_view * (1.0 / sf)``). Using the same
  floor is what lets a UE8M0 scale survive vLLM's E8M0 re-quantization
  (``requant_weight_ue8m0_inplace``, ``vllm/model_executor/layers/quantization/utils/fp8_utils.py``:
  0.24.0 line 989, 0.33.0 line 1096), which dequantizes with the old scale and calls
  ``per_block_cast_to_fp8(..., use_ue8m0=True)`` again.
* The clamp is explicit: on CUDA a plain cast of a float above 464 to ``float8_e4m3fn`` gives NaN.
* Ragged edges are handled as if zero-padded to whole blocks (zeros never raise an amax), and
  the output weight keeps the input's shape; the scale tensor has ``ceil(M/bm) x ceil(N/bn)``
  entries per matrix, the shape vLLM/SGLang's ``weight_scale_inv`` parameter has.
* All-zero blocks get the floor scale (``1e-4/448``, or ``2**-22`` for UE8M0) and zeros.

Naming: a weight ``<name>`` travels as ``<name>`` (float8_e4m3fn) plus ``<name>_scale_inv``
(float32), as verl 0.9.1 does (``verl/utils/vllm/vllm_quant_utils.py`` line 404,
``verl/utils/fp8_utils.py`` line 124) and as vLLM's block-FP8 ``Fp8LinearMethod`` registers it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
DEFAULT_BLOCK = (128, 128)
DEFAULT_AMAX_FLOOR = 1e-4
SCALE_FMTS = ("fp32", "ue8m0", "ue8m0_fixed")
SCALE_SUFFIX = "_scale_inv"


def scale_name(weight_name: str) -> str:
    """The name the engine loads the block scales of ``weight_name`` under."""
    return weight_name + SCALE_SUFFIX


def _check_args(x: torch.Tensor, block: Sequence[int], scale_fmt: str) -> tuple[int, int]:
    if scale_fmt not in SCALE_FMTS:
        raise ValueError(f"scale_fmt must be one of {SCALE_FMTS}, got {scale_fmt!r}")
    if x.dim() < 2:
        raise ValueError(f"expected a tensor with >= 2 dims (…, M, N), got shape {tuple(x.shape)}")
    if not (x.is_floating_point() and x.dtype.itemsize >= 2):
        raise ValueError(f"expected a bf16/fp16/fp32 tensor, got {x.dtype}")
    bm, bn = int(block[0]), int(block[1])
    if bm <= 0 or bn <= 0:
        raise ValueError(f"block sizes must be positive, got {block}")
    return bm, bn


def pow2_ceil(t: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= t, exactly, for positive normal float32 ``t``.

    Works on the bit pattern (no log2 rounding): bump the exponent when the mantissa is non-zero.
    """
    if t.dtype != torch.float32:
        raise TypeError("pow2_ceil expects float32")
    bits = t.contiguous().view(torch.int32)
    exp = bits >> 23
    exp = exp + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exp << 23).view(torch.float32).reshape(t.shape)


def _div(a, b) -> torch.Tensor:
    """IEEE float32 division with tensor operands on both sides.

    Not ``a / 448.0``: for a Python-scalar divisor torch's CUDA kernel multiplies by the scalar's
    reciprocal, a different float operation from the CPU's true division, so the reference would
    depend on the device. Tensor / tensor is a correctly rounded division on CPU and CUDA, and is
    what the Triton kernel does (``tl.math.div_rn``).
    """
    if not isinstance(a, torch.Tensor):
        a = torch.full_like(b, float(a))
    if not isinstance(b, torch.Tensor):
        b = torch.full_like(a, float(b))
    return torch.div(a, b)


def compute_scales(
    amax: torch.Tensor, scale_fmt: str = "fp32", amax_floor: float = DEFAULT_AMAX_FLOOR
) -> torch.Tensor:
    """Block scales (``weight_scale_inv``) from float32 block amax values.

    ``ue8m0`` is ``2**ceil(log2(amax/448))``: a power of two, never below the fp32 scale.
    ``ue8m0_fixed`` is the same, halved for the blocks whose largest value would quantize to exactly
    224 (the max lands on the binade edge, amax/scale in (224, 232]). vLLM's E8M0 re-quantization
    rewrites such a block as (2q, scale/2) (same values, different scale). Halving up front makes the
    scale a fixed point of that re-quantization; the largest value then saturates to 448 from at most
    464, an error no larger than ordinary E4M3 rounding (half an ulp at 448 is 16). Every other
    element is represented exactly as with ``ue8m0``. The price: the scale can be up to 464/448 times
    smaller than amax/448.
    """
    a = torch.clamp_min(amax.to(torch.float32), amax_floor)
    s = _div(a, FP8_MAX)
    if scale_fmt in ("ue8m0", "ue8m0_fixed"):
        s = pow2_ceil(s)
        if scale_fmt == "ue8m0_fixed":
            top = torch.clamp(a * _div(1.0, s), max=FP8_MAX).to(FP8_DTYPE).to(torch.float32)
            s = torch.where(top <= FP8_MAX / 2, s * 0.5, s)
    elif scale_fmt != "fp32":
        raise ValueError(f"scale_fmt must be one of {SCALE_FMTS}, got {scale_fmt!r}")
    return s


def _pad_view(x: torch.Tensor, bm: int, bn: int):
    """float32 copy of x zero-padded to whole blocks, viewed as (L, gm, bm, gn, bn)."""
    *lead, m, n = x.shape
    gm, gn = -(-m // bm), -(-n // bn)
    L = 1
    for d in lead:
        L *= d
    xf = torch.zeros((L, gm * bm, gn * bn), dtype=torch.float32, device=x.device)
    xf[:, :m, :n] = x.reshape(L, m, n)
    return xf.view(L, gm, bm, gn, bn), (lead, m, n, gm, gn, L)


def quantize_blockwise(
    x: torch.Tensor,
    block: Sequence[int] = DEFAULT_BLOCK,
    scale_fmt: str = "fp32",
    amax_floor: float = DEFAULT_AMAX_FLOOR,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference blockwise FP8 quantization of a (..., M, N) tensor.

    Returns ``(q, scale_inv)``: ``q`` is float8_e4m3fn with x's shape, ``scale_inv`` is float32 with
    shape (..., ceil(M/bm), ceil(N/bn)), and ``x ~= q * scale_inv`` (scale expanded over its block).
    """
    bm, bn = _check_args(x, block, scale_fmt)
    xv, (lead, m, n, gm, gn, L) = _pad_view(x, bm, bn)
    amax = xv.abs().amax(dim=(2, 4), keepdim=True)  # (L, gm, 1, gn, 1)
    s = compute_scales(amax, scale_fmt, amax_floor)
    inv = _div(1.0, s)
    q = torch.clamp(xv * inv, -FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    q = q.view(L, gm * bm, gn * bn)[:, :m, :n].reshape(*lead, m, n).contiguous()
    return q, s.reshape(*lead, gm, gn).contiguous()


def expand_scales(
    scale_inv: torch.Tensor, shape: Sequence[int], block: Sequence[int] = DEFAULT_BLOCK
) -> torch.Tensor:
    """Per-element scales: each block scale repeated over its block, cropped to ``shape``."""
    bm, bn = int(block[0]), int(block[1])
    m, n = int(shape[-2]), int(shape[-1])
    e = scale_inv.repeat_interleave(bm, dim=-2).repeat_interleave(bn, dim=-1)
    return e[..., :m, :n]


def dequantize_blockwise(
    q: torch.Tensor,
    scale_inv: torch.Tensor,
    block: Sequence[int] = DEFAULT_BLOCK,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """q * scale_inv, computed in float32 (as the engines dequantize), returned as ``dtype``."""
    return (q.to(torch.float32) * expand_scales(scale_inv.to(torch.float32), q.shape, block)).to(dtype)


# --------------------------------------------------------------------------------------------------
# Fused projections (QKV, gate/up): the engine quantizes the fused, TP-local tensor.
# --------------------------------------------------------------------------------------------------


def fused_grid_problems(part_rows: Sequence[int], block_m: int = 128, tp_size: int = 1) -> list[str]:
    """Why per-part quantization would not land on the engine's block grid (empty list: it does).

    The engine (vLLM ``MergedColumnParallelLinear`` / ``QKVParallelLinear``, SGLang likewise) stacks the
    parts along the output dim and, with TP, gives each rank ``rows/tp`` rows of every part. Blocks of
    the fused TP-local tensor coincide with blocks of the separately quantized parts iff every part
    boundary inside the fused local tensor falls on a multiple of ``block_m``, i.e. every part's
    per-rank row count except the last is a multiple of ``block_m``, and the per-rank share of the
    full-tensor quantization is whole blocks (each part's rows/tp a multiple of block_m when tp > 1).
    """
    problems = []
    for i, r in enumerate(part_rows):
        if r % tp_size:
            problems.append(f"part {i}: {r} rows do not split over tp={tp_size}")
            continue
        local = r // tp_size
        last = i == len(part_rows) - 1
        if local % block_m and (tp_size > 1 or not last):
            problems.append(f"part {i}: {local} rows per rank is not a multiple of block {block_m}")
    return problems


def quantize_fused(
    parts: Sequence[torch.Tensor],
    block: Sequence[int] = DEFAULT_BLOCK,
    scale_fmt: str = "fp32",
    amax_floor: float = DEFAULT_AMAX_FLOOR,
    split: bool = True,
) -> tuple[torch.Tensor, torch.Tensor] | list[tuple[torch.Tensor, torch.Tensor]]:
    """Quantize parts (q/k/v or gate/up) on the grid of their fused tensor (concatenated on dim -2).

    With ``split=True`` returns per-part ``[(q_i, scale_i), ...]`` cut from the fused result; this needs
    every part boundary on a block boundary (``fused_grid_problems``), otherwise ValueError, because
    a block straddling two parts cannot be expressed as per-part scales. With ``split=False`` returns
    the fused ``(q, scale)`` whatever the alignment.
    """
    bm = int(block[0])
    fused = torch.cat(list(parts), dim=-2)
    q, s = quantize_blockwise(fused, block, scale_fmt, amax_floor)
    if not split:
        return q, s
    rows = [p.shape[-2] for p in parts]
    probs = fused_grid_problems(rows, bm)
    if probs:
        raise ValueError("parts do not sit on the fused block grid: " + "; ".join(probs))
    out, r0 = [], 0
    for r in rows:
        out.append(
            (q[..., r0 : r0 + r, :].contiguous(), s[..., r0 // bm : -(-(r0 + r) // bm), :].contiguous())
        )
        r0 += r
    return out
