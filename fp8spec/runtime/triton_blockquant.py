"""Bucketed blockwise FP8 quantization on the GPU: one Triton launch per bucket of tensors.

Weight sync delivers weights in buckets (verl 0.9.1: ``checkpoint_engine.update_weights_bucket_megabytes``,
2048 MB by default, ``verl/trainer/config/rollout/rollout.yaml``). verl quantizes them one tensor at a time
(``scaled_fp8_blockwise``, one launch each, plus a pad/crop copy for ragged shapes); for an MoE model
sent as per-expert 2-D tensors that is tens of thousands of launches and launch overhead dominates.
Here a whole bucket is one launch: every ``block_m x block_n`` tile of every tensor (and of every
expert of a 3-D tensor) is one program, found through a small per-matrix table; outputs of the
bucket are views into one fp8 buffer and one float32 scale buffer.

The result is bit-identical to ``blockquant.quantize_blockwise`` (same float32 operations in the
same order: exact amax, IEEE round-to-nearest divisions via ``tl.math.div_rn`` because Triton's ``/``
is an approximate division, multiply by the reciprocal, explicit clamp, round-to-nearest-even cast).

Import needs only torch; triton is imported lazily, and without CUDA/triton ``quantize_bucket``
falls back to the reference, tensor by tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import blockquant as _ref

_FMT_CODE = {"fp32": 0, "ue8m0": 1, "ue8m0_fixed": 2}
_META_COLS = 8  # x_off, y_off, s_off, M, N, ldx, gn, tile_start
_kernel = None
_triton_error: Exception | None = None


def triton_available() -> bool:
    """True when the Triton kernel can be built (triton importable and CUDA present)."""
    return _get_kernel() is not None and torch.cuda.is_available()


def _get_kernel():
    global _kernel, _triton_error
    if _kernel is not None or _triton_error is not None:
        return _kernel
    try:
        import triton
        import triton.language as tl
    except Exception as e:  # pragma: no cover - depends on the image
        _triton_error = e
        return None

    div_rn = getattr(tl.math, "div_rn", None)

    @triton.jit
    def _bucket_quant_kernel(
        X,  # base pointer of the bucket's inputs (bf16/fp16/fp32); every input is X + x_off
        Y,  # base pointer of the fp8 output buffer
        S,  # base pointer of the float32 scale buffer
        META,  # int64 [n_mat, 8]
        TILE2MAT,  # int32 [n_tiles]
        amax_floor,
        fp8_max,  # 448.0 and 1.0 passed as fp32 scalars so the divisions below take tensor operands
        one,
        BM: tl.constexpr,
        BN: tl.constexpr,
        FMT: tl.constexpr,
        PRECISE_DIV: tl.constexpr,
    ):
        pid = tl.program_id(0)
        mat = tl.load(TILE2MAT + pid).to(tl.int64)
        row = META + mat * 8
        x_off = tl.load(row + 0)
        y_off = tl.load(row + 1)
        s_off = tl.load(row + 2)
        M = tl.load(row + 3)
        N = tl.load(row + 4)
        ldx = tl.load(row + 5)
        gn = tl.load(row + 6)
        local = pid - tl.load(row + 7)
        tm = local // gn
        tn = local - tm * gn
        rm = tm * BM + tl.arange(0, BM).to(tl.int64)
        rn = tn * BN + tl.arange(0, BN).to(tl.int64)
        mask = (rm < M)[:, None] & (rn < N)[None, :]
        x = tl.load(X + x_off + rm[:, None] * ldx + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        amax = tl.max(tl.max(tl.abs(x), axis=1), axis=0)
        amax = tl.maximum(amax, amax_floor)
        if PRECISE_DIV:
            s = tl.math.div_rn(amax, fp8_max)
        else:
            s = amax / fp8_max
        if FMT >= 1:
            bits = s.to(tl.int32, bitcast=True)
            e = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
            s = (e << 23).to(tl.float32, bitcast=True)
            if FMT == 2:
                if PRECISE_DIV:
                    inv0 = tl.math.div_rn(one, s)
                else:
                    inv0 = one / s
                top = tl.minimum(amax * inv0, 448.0).to(tl.float8e4nv).to(tl.float32)
                s = tl.where(top <= 224.0, s * 0.5, s)
        if PRECISE_DIV:
            inv = tl.math.div_rn(one, s)
        else:
            inv = one / s
        q = tl.clamp(x * inv, -448.0, 448.0).to(tl.float8e4nv)
        tl.store(Y + y_off + rm[:, None] * N + rn[None, :], q, mask=mask)
        tl.store(S + s_off + tm * gn + tn, s)

    _bucket_quant_kernel.precise_div = div_rn is not None
    _kernel = _bucket_quant_kernel
    return _kernel


class BucketPlan:
    """Shape-only part of a bucket launch (tile -> matrix table), cached per shape signature."""

    def __init__(self, shapes: Sequence[tuple[int, ...]], block: tuple[int, int], device: torch.device):
        bm, bn = block
        mats = []  # (tensor index, lead index, M, N, gm, gn)
        y_starts, s_starts = [], []
        y_total = s_total = 0
        for ti, shp in enumerate(shapes):
            m, n = shp[-2], shp[-1]
            lead = 1
            for d in shp[:-2]:
                lead *= d
            gm, gn = -(-m // bm), -(-n // bn)
            y_starts.append(y_total)
            s_starts.append(s_total)
            for li in range(lead):
                mats.append((ti, li, m, n, gm, gn))
            y_total += lead * m * n
            s_total += lead * gm * gn
        self.shapes = [tuple(s) for s in shapes]
        self.block = block
        self.mats = mats
        self.y_starts, self.s_starts = y_starts, s_starts
        self.y_total, self.s_total = y_total, s_total
        n_tiles = torch.tensor([gm * gn for (_, _, _, _, gm, gn) in mats], dtype=torch.int64)
        self.tile_start = torch.cumsum(n_tiles, 0) - n_tiles
        self.n_tiles = int(n_tiles.sum())
        self.tile2mat = torch.repeat_interleave(
            torch.arange(len(mats), dtype=torch.int32, device=device), n_tiles.to(device)
        )
        # static columns of META
        self._static = torch.tensor(
            [(m, n, gn) for (_, _, m, n, _, gn) in mats], dtype=torch.int64
        ).reshape(len(mats), 3)
        # output offsets (contiguous outputs, per tensor then per lead index)
        y_off, s_off = [], []
        for ti, li, m, n, gm, gn in mats:
            y_off.append(y_starts[ti] + li * m * n)
            s_off.append(s_starts[ti] + li * gm * gn)
        self._y_off = torch.tensor(y_off, dtype=torch.int64)
        self._s_off = torch.tensor(s_off, dtype=torch.int64)


_PLAN_CACHE: dict = {}
_PLAN_CACHE_MAX = 64


def _plan_for(shapes, block, device) -> BucketPlan:
    key = (tuple(tuple(s) for s in shapes), block, str(device))
    plan = _PLAN_CACHE.get(key)
    if plan is None:
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.pop(next(iter(_PLAN_CACHE)))
        plan = BucketPlan(shapes, block, device)
        _PLAN_CACHE[key] = plan
    return plan


def _reference_bucket(tensors, block, scale_fmt, amax_floor):
    return [_ref.quantize_blockwise(t, block, scale_fmt, amax_floor) for t in tensors]


def quantize_bucket(
    tensors: Sequence[torch.Tensor],
    block: Sequence[int] = _ref.DEFAULT_BLOCK,
    scale_fmt: str = "fp32",
    amax_floor: float = _ref.DEFAULT_AMAX_FLOOR,
    backend: str = "auto",
    num_warps: int = 8,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Quantize a bucket of (…, M, N) tensors; returns ``[(q, scale_inv), …]`` in input order.

    ``backend``: ``"auto"`` (Triton when every tensor is on CUDA and triton imports, else reference),
    ``"triton"`` (error if unavailable) or ``"reference"``. One launch per input dtype group (one
    launch for a normal bf16 bucket). Outputs are views of one fp8 and one fp32 buffer per group.
    """
    if scale_fmt not in _FMT_CODE:
        raise ValueError(f"scale_fmt must be one of {tuple(_FMT_CODE)}, got {scale_fmt!r}")
    block = (int(block[0]), int(block[1]))
    tensors = list(tensors)
    if not tensors:
        return []
    use_triton = backend == "triton" or (
        backend == "auto" and all(t.is_cuda for t in tensors) and _get_kernel() is not None
    )
    if backend == "reference" or not use_triton:
        return _reference_bucket(tensors, block, scale_fmt, amax_floor)
    kernel = _get_kernel()
    if kernel is None:
        raise RuntimeError(f"triton backend requested but triton is unavailable: {_triton_error!r}")
    for t in tensors:
        _ref._check_args(t, block, scale_fmt)
        if not t.is_cuda:
            raise ValueError("triton backend needs CUDA tensors")

    out: list = [None] * len(tensors)
    groups: dict = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.device), []).append(i)
    for (dtype, device), idx in groups.items():
        group = []
        for i in idx:
            t = tensors[i]
            # last dim must be contiguous and leading dims collapsible; otherwise copy
            if t.dim() == 2 and t.stride(-1) == 1 and t.stride(0) >= t.shape[1]:
                group.append(t)
            elif t.is_contiguous():
                group.append(t)
            else:
                group.append(t.contiguous())
        res = _launch(kernel, group, block, scale_fmt, amax_floor, device, num_warps)
        for i, r in zip(idx, res):
            out[i] = r
    return out


def _launch(kernel, group, block, scale_fmt, amax_floor, device, num_warps):
    plan = _plan_for([tuple(t.shape) for t in group], block, device)
    esize = group[0].element_size()
    base = group[0]
    base_ptr = base.data_ptr()
    # input offsets (elements from the base pointer; may be negative, the address space is flat)
    x_off, ldx = [], []
    for ti, li, m, n, gm, gn in plan.mats:
        t = group[ti]
        d = t.data_ptr() - base_ptr
        if d % esize:
            raise ValueError("input is not aligned to its element size")
        row_stride = t.stride(-2)
        lead_stride = m * n if t.dim() > 2 else 0
        x_off.append(d // esize + li * lead_stride)
        ldx.append(row_stride)
    y = torch.empty(plan.y_total, dtype=_ref.FP8_DTYPE, device=device)
    s = torch.empty(plan.s_total, dtype=torch.float32, device=device)
    meta = torch.empty((len(plan.mats), _META_COLS), dtype=torch.int64)
    meta[:, 0] = torch.tensor(x_off, dtype=torch.int64)
    meta[:, 1] = plan._y_off
    meta[:, 2] = plan._s_off
    meta[:, 3:5] = plan._static[:, 0:2]
    meta[:, 5] = torch.tensor(ldx, dtype=torch.int64)
    meta[:, 6] = plan._static[:, 2]
    meta[:, 7] = plan.tile_start
    meta = meta.to(device, non_blocking=True)
    if plan.n_tiles:
        kernel[(plan.n_tiles,)](
            base,
            y,
            s,
            meta,
            plan.tile2mat,
            float(amax_floor),
            448.0,
            1.0,
            BM=block[0],
            BN=block[1],
            FMT=_FMT_CODE[scale_fmt],
            PRECISE_DIV=kernel.precise_div,
            num_warps=num_warps,
        )
    res = []
    bm, bn = block
    for ti, shp in enumerate(plan.shapes):
        m, n = shp[-2], shp[-1]
        gm, gn = -(-m // bm), -(-n // bn)
        numel = 1
        for d in shp:
            numel *= d
        snum = numel // (m * n) * gm * gn if m * n else 0
        q = y[plan.y_starts[ti] : plan.y_starts[ti] + numel].view(shp)
        sc = s[plan.s_starts[ti] : plan.s_starts[ti] + snum].view(*shp[:-2], gm, gn)
        res.append((q, sc))
    return res
