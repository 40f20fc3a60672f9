"""Planning a bucketed quantization launch: which tile of which tensor each program handles, and where outputs go.

Shape arithmetic only (torch on the CPU; the tables are copied to the launch device): a ``BucketPlan`` turns the
shapes of a bucket's tensors (and, for a flat bucket, their element offsets in the flat input buffer) into the
kernel's per-matrix table (``META``, one row per 2-D matrix: x_off, y_off, s_off, M, N, ldx, gn, tile_start), the
tile -> matrix map and the per-tensor output views. ``triton_blockquant`` launches plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fp8spec.runtime.quantization import blockquant as _ref

SCALE_FMT_CODE = {"fp32": 0, "ue8m0": 1, "ue8m0_fixed": 2}
META_COLS = 8  # x_off, y_off, s_off, M, N, ldx, gn, tile_start


def check_fmt(scale_fmt: str) -> None:
    if scale_fmt not in SCALE_FMT_CODE:
        raise ValueError(f"scale_fmt must be one of {tuple(SCALE_FMT_CODE)}, got {scale_fmt!r}")


class BucketPlan:
    """Shape-only part of a bucket launch (matrix table, tile -> matrix map, output offsets).

    ``shapes`` are the tensors' shapes; ``x_offsets`` (optional, elements) and ``row_strides`` describe
    where each tensor starts in a flat input buffer. With them the plan is complete and reusable for
    every call on a buffer of that layout (``quantize_flat``): no per-tensor Python work per call.
    """

    def __init__(self, shapes, block, device, x_offsets=None, row_strides=None):
        bm, bn = block
        self.shapes = [tuple(s) for s in shapes]
        self.block = block
        self.device = torch.device(device)
        nt = len(self.shapes)
        m = torch.tensor([s[-2] for s in self.shapes], dtype=torch.int64).reshape(nt)
        n = torch.tensor([s[-1] for s in self.shapes], dtype=torch.int64).reshape(nt)
        numel = torch.tensor([_prod(s) for s in self.shapes], dtype=torch.int64).reshape(nt)
        lead = torch.where(m * n > 0, numel // torch.clamp(m * n, min=1), torch.zeros_like(numel))
        gm, gn = (m + bm - 1) // bm, (n + bn - 1) // bn
        snum = lead * gm * gn
        self.numel, self.snum = numel.tolist(), snum.tolist()
        self.y_total, self.s_total = int(numel.sum()), int(snum.sum())
        # Outputs are laid out by column count (N for weights, gn for scales): tensors sharing a
        # column count sit back to back as one [rows, cols] matrix, so the per-tensor views come from
        # one ``split`` per distinct column count instead of Python slicing per tensor.
        lead_l, m_l, n_l, gm_l, gn_l = lead.tolist(), m.tolist(), n.tolist(), gm.tolist(), gn.tolist()
        ys, self.y_groups = _grouped_layout(n_l, [a * b for a, b in zip(lead_l, m_l)])
        ss, self.s_groups = _grouped_layout(gn_l, [a * b for a, b in zip(lead_l, gm_l)])
        self.y_starts, self.s_starts = ys, ss
        self.multi = [i for i, shp in enumerate(self.shapes) if len(shp) != 2]
        self.scale_shapes = [(*shp[:-2], g1, g2) for shp, g1, g2 in zip(self.shapes, gm_l, gn_l)]
        # one row per 2-D matrix (a 3-D tensor contributes one per leading index)
        self.mat_tensor = torch.repeat_interleave(torch.arange(nt, dtype=torch.int64), lead)
        mat_li = torch.arange(len(self.mat_tensor), dtype=torch.int64) - torch.repeat_interleave(
            torch.cumsum(lead, 0) - lead, lead
        )
        self.mat_li = mat_li
        mt = self.mat_tensor
        mm, nn_, gmm, gnn = m[mt], n[mt], gm[mt], gn[mt]
        tiles = gmm * gnn
        self.n_tiles = int(tiles.sum())
        meta = torch.empty((len(mt), META_COLS), dtype=torch.int64)
        meta[:, 1] = torch.tensor(self.y_starts, dtype=torch.int64).reshape(nt)[mt] + mat_li * mm * nn_
        meta[:, 2] = torch.tensor(self.s_starts, dtype=torch.int64).reshape(nt)[mt] + mat_li * gmm * gnn
        meta[:, 3], meta[:, 4], meta[:, 6] = mm, nn_, gnn
        meta[:, 7] = torch.cumsum(tiles, 0) - tiles
        meta[:, 5] = nn_  # contiguous row stride unless told otherwise
        meta[:, 0] = 0
        self._mn = mm * nn_
        self.meta_cpu = meta
        self.tile2mat = torch.repeat_interleave(
            torch.arange(len(mt), dtype=torch.int32, device=self.device), tiles.to(self.device)
        )
        self.meta_dev = None
        self.x_offsets = [int(o) for o in x_offsets] if x_offsets is not None else None
        # elements of the flat input the plan reads (its end): a buffer shorter than this is refused
        self.x_extent = (
            max((o + n for o, n in zip(self.x_offsets, self.numel)), default=0)
            if self.x_offsets is not None
            else 0
        )
        self.aligned = False
        if x_offsets is not None:
            full = self.meta_with_inputs(x_offsets, row_strides)
            self.aligned = aligned(full)
            self.meta_dev = full.to(self.device)

    def meta_with_inputs(
        self, x_offsets: Sequence[int] | torch.Tensor, row_strides: Sequence[int] | torch.Tensor | None = None
    ) -> torch.Tensor:
        """META with the input columns filled: per-tensor element offsets from the base pointer."""
        meta = self.meta_cpu.clone()
        xo = torch.as_tensor(x_offsets, dtype=torch.int64).reshape(-1)[self.mat_tensor]
        # leading (expert) index steps by M*N elements (inputs with leading dims are contiguous)
        meta[:, 0] = xo + self.mat_li * self._mn
        if row_strides is not None:
            meta[:, 5] = torch.as_tensor(row_strides, dtype=torch.int64).reshape(-1)[self.mat_tensor]
        return meta

    def outputs(self, y: torch.Tensor, s: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-tensor ``(q, scale_inv)`` views of the flat output buffers, in input order."""
        qs = _split_views(y, self.y_groups, len(self.shapes))
        ss = _split_views(s, self.s_groups, len(self.shapes))
        for i in self.multi:
            qs[i] = qs[i].view(self.shapes[i])
            ss[i] = ss[i].view(self.scale_shapes[i])
        return list(zip(qs, ss))


def _grouped_layout(cols, rows):
    """Start offsets (elements) per tensor, and groups (cols, start, total_rows, idxs, rows)."""
    by_col: dict = {}
    for i, c in enumerate(cols):
        by_col.setdefault(c, []).append(i)
    starts = [0] * len(cols)
    groups, pos = [], 0
    for c, idxs in by_col.items():
        rl = [rows[i] for i in idxs]
        g0 = pos
        for i, r in zip(idxs, rl):
            starts[i] = pos
            pos += r * c
        groups.append((c, g0, sum(rl), idxs, rl))
    return starts, groups


def _split_views(buf, groups, n):
    out = [None] * n
    for c, g0, total, idxs, rl in groups:
        parts = buf[g0 : g0 + total * c].view(total, c).split(rl, 0)
        for i, p in zip(idxs, parts):
            out[i] = p
    return out


def _prod(shape) -> int:
    p = 1
    for d in shape:
        p *= int(d)
    return p


_PLAN_CACHE: dict = {}
_PLAN_CACHE_MAX = 64


def plan_for(shapes: Sequence[Sequence[int]], block: tuple[int, int], device: Any) -> BucketPlan:
    """A cached plan for a tensor-list bucket of these shapes (no input offsets: they differ per call)."""
    key = (tuple(shapes), block, device)
    plan = _PLAN_CACHE.get(key)
    if plan is None:
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.pop(next(iter(_PLAN_CACHE)))
        plan = BucketPlan(shapes, block, device)
        _PLAN_CACHE[key] = plan
    return plan


def make_flat_plan(
    shapes: Sequence[Sequence[int]],
    offsets: Sequence[int],
    block: Sequence[int] = _ref.DEFAULT_BLOCK,
    device: torch.device | str = "cuda",
) -> BucketPlan:
    """Plan for ``quantize_flat``: tensors of ``shapes`` stored contiguously at element ``offsets`` of a
    flat buffer (the layout a weight-sync bucket arrives in). Build once per layout, reuse every step."""
    return BucketPlan(shapes, (int(block[0]), int(block[1])), device, x_offsets=offsets)


def check_out(out: tuple[torch.Tensor, torch.Tensor], plan: BucketPlan, device: torch.device) -> None:
    y, s = out
    if y.dtype != _ref.FP8_DTYPE or s.dtype != torch.float32 or y.dim() != 1 or s.dim() != 1:
        raise ValueError("out must be (1-D float8_e4m3fn, 1-D float32) buffers")
    if not (y.is_contiguous() and s.is_contiguous()) or y.device != device or s.device != device:
        raise ValueError("out buffers must be contiguous and on the input's device")
    if y.numel() < plan.y_total or s.numel() < plan.s_total:
        raise ValueError(f"out buffers too small: need {plan.y_total} / {plan.s_total} elements")


def same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` are the same device when 0 is the current one."""
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        cur = torch.cuda.current_device() if a.type == "cuda" and torch.cuda.is_available() else None
        return (a.index if a.index is not None else cur) == (b.index if b.index is not None else cur)
    return a.index == b.index


def aligned(meta_cpu: torch.Tensor) -> bool:
    """Every input and output offset, row stride and N of the table is a multiple of 16 elements."""
    return bool((meta_cpu[:, [0, 1, 4, 5]] % 16 == 0).all()) if len(meta_cpu) else True
