"""Bucketed blockwise FP8 quantization on the GPU: one Triton launch per bucket of tensors.

Weight sync delivers weights in buckets (verl 0.9.1: ``checkpoint_engine.update_weights_bucket_megabytes``,
2048 MB by default, ``verl/trainer/config/rollout/rollout.yaml``). verl quantizes them one tensor at a time
(``scaled_fp8_blockwise``, one launch each, plus a pad/crop copy for ragged shapes); for an MoE model
sent as per-expert 2-D tensors that is tens of thousands of launches and launch overhead dominates.
Here a whole bucket is one launch: every ``block_m x block_n`` tile of every tensor (and of every
expert of a 3-D tensor) is one program, found through a small per-matrix table; outputs of the
bucket are views into one fp8 buffer and one float32 scale buffer. The tables come from a ``BucketPlan``
(``bucket_plan``: shape arithmetic, CPU-testable); this module builds the kernel and launches plans.

The result is bit-identical to ``blockquant.quantize_blockwise`` (same float32 operations in the
same order: exact amax, IEEE round-to-nearest divisions via ``tl.math.div_rn`` because Triton's ``/``
is an approximate division, multiply by the reciprocal, explicit clamp, round-to-nearest-even cast).

Import needs only torch; triton is imported lazily, and without CUDA/triton ``quantize_bucket``
falls back to the reference, tensor by tensor.

``flat_launcher.FlatLauncher`` launches one flat plan again and again into fixed output buffers with the
arguments bound once, optionally through the compiled kernel's own runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fp8spec.runtime.quantization import blockquant as _ref
from fp8spec.runtime.quantization.bucket_plan import (
    SCALE_FMT_CODE,
    BucketPlan,
    aligned,
    check_fmt,
    check_out,
    plan_for,
)
from fp8spec.runtime.quantization.bucket_plan import (
    make_flat_plan as make_flat_plan,  # re-exported: a flat plan is what quantize_flat takes
)

_kernel = None
_triton_error: Exception | None = None


def triton_available() -> bool:
    """True when the Triton kernel can be built (triton importable and CUDA present)."""
    return get_kernel() is not None and torch.cuda.is_available()


def get_kernel() -> Any:
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
        ALIGNED: tl.constexpr,  # every x_off, y_off, row stride and N is a multiple of 16 elements
        ROUND: tl.constexpr,  # 0: as loaded; 1 / 2: float32 input rounded to bf16 / fp16 first (ROUND_CODE)
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
        if ALIGNED:  # lets Triton emit 16-byte vector loads/stores (it cannot prove it for runtime ints)
            x_off = tl.multiple_of(x_off, 16)
            y_off = tl.multiple_of(y_off, 16)
            N = tl.multiple_of(N, 16)
            ldx = tl.multiple_of(ldx, 16)
        local = pid - tl.load(row + 7)
        tm = local // gn
        tn = local - tm * gn
        rm = tm * BM + tl.arange(0, BM).to(tl.int64)
        rn = tn * BN + tl.arange(0, BN).to(tl.int64)
        mask = (rm < M)[:, None] & (rn < N)[None, :]
        x = tl.load(X + x_off + rm[:, None] * ldx + rn[None, :], mask=mask, other=0.0)
        if ROUND == 1:  # round to nearest even, as torch's float32 -> bf16 cast: the engine's v.to(dtype)
            x = x.to(tl.bfloat16)
        elif ROUND == 2:
            x = x.to(tl.float16)
        x = x.to(tl.float32)
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
                # amax/s is in (224, 448]; its E4M3 rounding is 224 exactly when it is <= 232
                # (spacing 16 in [224, 256), the tie at 232 goes to the even code 224). The reference
                # computes the same condition with an actual cast; the bit-identity tests tie them.
                if PRECISE_DIV:
                    inv0 = tl.math.div_rn(one, s)
                else:
                    inv0 = one / s
                s = tl.where(amax * inv0 <= 232.0, s * 0.5, s)
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


# the kernel's ROUND: a float32 input rounded to this dtype as it is loaded (the engine's v.to(dtype))
ROUND_CODE = {torch.bfloat16: 1, torch.float16: 2}


def round_code(src: torch.dtype, round_to: torch.dtype | None) -> int:
    """The kernel's ROUND for an input of ``src`` quantized as if cast to ``round_to`` first."""
    if round_to is None or round_to == src:
        return 0
    if src != torch.float32 or round_to not in ROUND_CODE:
        raise ValueError(f"round_to: only float32 inputs round, to bf16 or fp16 (got {src} -> {round_to})")
    return ROUND_CODE[round_to]


def _reference_bucket(tensors, block, scale_fmt, amax_floor):
    return [_ref.quantize_blockwise(t, block, scale_fmt, amax_floor) for t in tensors]


def quantize_bucket(
    tensors: Sequence[torch.Tensor],
    block: Sequence[int] = _ref.DEFAULT_BLOCK,
    scale_fmt: str = "fp32",
    amax_floor: float = _ref.DEFAULT_AMAX_FLOOR,
    backend: str = "auto",
    num_warps: int = 4,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Quantize a bucket of (…, M, N) tensors; returns ``[(q, scale_inv), …]`` in input order.

    ``backend``: ``"auto"`` (Triton when the tensors are on CUDA and triton imports, else reference),
    ``"triton"`` (error if unavailable) or ``"reference"``. One launch per input dtype (one launch for
    a normal bf16 bucket). Outputs are views of one fp8 and one float32 buffer per launch.
    """
    check_fmt(scale_fmt)
    block = (int(block[0]), int(block[1]))
    tensors = list(tensors)
    if not tensors:
        return []
    if backend not in ("auto", "triton", "reference"):
        raise ValueError(f"backend must be auto, triton or reference, got {backend!r}")
    kernel = get_kernel() if backend != "reference" else None
    use_triton = kernel is not None and (backend == "triton" or tensors[0].is_cuda)
    if backend == "triton" and kernel is None:
        raise RuntimeError(f"triton backend requested but triton is unavailable: {_triton_error!r}")
    if not use_triton:
        return _reference_bucket(tensors, block, scale_fmt, amax_floor)
    device = tensors[0].device
    if device.type != "cuda":
        raise ValueError("triton backend needs CUDA tensors")
    dtypes = [t.dtype for t in tensors]
    if dtypes.count(dtypes[0]) == len(dtypes):
        groups = {dtypes[0]: list(range(len(tensors)))}
    else:
        groups = {}
        for i, dt in enumerate(dtypes):
            groups.setdefault(dt, []).append(i)
    dev_index = device.index if device.index is not None else torch.cuda.current_device()
    out: list = [None] * len(tensors)
    for dtype, idx in groups.items():
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"expected bf16/fp16/fp32 tensors, got {dtype}")
        group = [tensors[i] for i in idx]
        row_strides: list[int | None] | None = None
        contig = [t.is_contiguous() for t in group]
        if not all(contig):
            row_strides = [None] * len(group)
            for j, ok in enumerate(contig):
                t = group[j]
                if ok:
                    continue
                if t.dim() == 2 and t.stride(1) == 1 and t.stride(0) >= t.shape[1]:
                    row_strides[j] = t.stride(0)
                else:
                    group[j] = t.contiguous()
        devs = [t.get_device() for t in group]
        if devs.count(dev_index) != len(devs):
            raise ValueError("all tensors of a bucket must be on one CUDA device")
        shapes = [t.shape for t in group]
        if any(len(sh) < 2 for sh in shapes):
            raise ValueError("expected tensors with >= 2 dims (…, M, N)")
        plan = plan_for(shapes, block, device)
        esize = group[0].element_size()
        ptrs = torch.tensor([t.data_ptr() for t in group], dtype=torch.int64)
        delta = ptrs - ptrs[0]
        if bool((delta % esize).any()):
            raise ValueError("input is not aligned to its element size")
        strides = None
        if row_strides is not None:
            strides = [r if r is not None else sh[-1] for r, sh in zip(row_strides, plan.shapes)]
        meta_cpu = plan.meta_with_inputs(delta // esize, strides)
        # pinned + non_blocking: a copy from pageable memory would wait for the previous bucket's
        # kernel, serializing host preparation and GPU work across buckets
        meta = meta_cpu.pin_memory().to(device, non_blocking=True)
        y, s = _launch(kernel, group[0], plan, meta, scale_fmt, amax_floor, num_warps, aligned(meta_cpu))
        for i, r in zip(idx, plan.outputs(y, s)):
            out[i] = r
    return out


def quantize_flat(
    flat: torch.Tensor,
    plan: BucketPlan,
    scale_fmt: str = "fp32",
    amax_floor: float = _ref.DEFAULT_AMAX_FLOOR,
    num_warps: int = 4,
    views: bool = True,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    round_to: torch.dtype | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]] | tuple[torch.Tensor, torch.Tensor]:
    """Quantize every tensor of a flat bucket buffer in one launch; per-call host work is O(1).

    Returns per-tensor ``[(q, scale_inv), …]`` views, or with ``views=False`` the two flat output
    buffers ``(y, s)`` (``plan.outputs(y, s)`` makes the views later). ``out=(y, s)``: write into these
    1-D fp8 / float32 buffers (at least ``plan.y_total`` / ``plan.s_total`` elements, from element 0)
    instead of allocating; views made earlier with ``plan.outputs(y, s)`` then see the new values.
    ``round_to``: a float32 ``flat`` is quantized as ``flat.to(round_to)`` would be (bf16 / fp16), rounded in
    the kernel as it loads, with no cast copy of the bucket.
    """
    check_fmt(scale_fmt)
    code = round_code(flat.dtype, round_to)
    if out is not None:
        check_out(out, plan, flat.device)
    kernel = get_kernel()
    if kernel is None or not flat.is_cuda:
        assert plan.x_offsets is not None  # a flat plan
        tensors = [flat[o : o + n].view(s) for o, n, s in zip(plan.x_offsets, plan.numel, plan.shapes)]
        if code:
            tensors = [t.to(round_to) for t in tensors]
        res = _reference_bucket(tensors, plan.block, scale_fmt, amax_floor)
        if out is None:
            return res if views else _flatten_outputs(plan, res, flat.device)
        for (q, sc), (rq, rs) in zip(plan.outputs(*out), res):
            q.copy_(rq)
            sc.copy_(rs)
        return plan.outputs(*out) if views else out
    if flat.dim() != 1 or not flat.is_contiguous():
        raise ValueError("flat must be a contiguous 1-D tensor")
    y, s = _launch(
        kernel, flat, plan, plan.meta_dev, scale_fmt, amax_floor, num_warps, plan.aligned, out, code
    )
    return plan.outputs(y, s) if views else (y, s)


def quantize_flat_into(
    flat: torch.Tensor,
    plan: BucketPlan,
    meta: torch.Tensor,
    is_aligned: bool,
    bases: tuple[torch.Tensor, torch.Tensor],
    scale_fmt: str = "fp32",
    amax_floor: float = _ref.DEFAULT_AMAX_FLOOR,
    round_to: torch.dtype | None = None,
    num_warps: int = 4,
) -> None:
    """``quantize_flat`` with the outputs written wherever ``meta`` (the plan's matrix table, on the device) points:
    its output columns are element offsets from ``bases`` (an fp8 and a float32 tensor), which may lie anywhere in
    the device's memory, e.g. in the engine's parameters (``direct_sync``). CUDA and Triton only."""
    check_fmt(scale_fmt)
    kernel = get_kernel()
    if kernel is None or not flat.is_cuda:
        raise RuntimeError("quantize_flat_into needs Triton and a CUDA input")
    if flat.dim() != 1 or not flat.is_contiguous():
        raise ValueError("flat must be a contiguous 1-D tensor")
    code = round_code(flat.dtype, round_to)
    _launch(kernel, flat, plan, meta, scale_fmt, amax_floor, num_warps, is_aligned, bases, code)


def _flatten_outputs(plan, res, device):
    y = torch.empty(plan.y_total, dtype=_ref.FP8_DTYPE, device=device)
    s = torch.empty(plan.s_total, dtype=torch.float32, device=device)
    for (q, sc), (rq, rs) in zip(plan.outputs(y, s), res):
        q.copy_(rq)
        sc.copy_(rs)
    return y, s


def _launch(kernel, base, plan, meta, scale_fmt, amax_floor, num_warps, aligned, out=None, round_code=0):
    device = base.device
    if out is not None:
        y, s = out
    else:
        y = torch.empty(plan.y_total, dtype=_ref.FP8_DTYPE, device=device)
        s = torch.empty(plan.s_total, dtype=torch.float32, device=device)
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
            BM=plan.block[0],
            BN=plan.block[1],
            FMT=SCALE_FMT_CODE[scale_fmt],
            PRECISE_DIV=kernel.precise_div,
            ALIGNED=aligned,
            ROUND=round_code,
            num_warps=num_warps,
        )
    return y, s
