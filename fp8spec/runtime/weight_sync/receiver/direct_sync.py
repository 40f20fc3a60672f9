"""The direct weight-sync path's per-bucket step: quantize a received bucket straight into the engine's parameters.

Per bucket: the tensors the plan covers (``direct_sync_plan``) are quantized with one launch on one flat buffer
(``triton_blockquant.quantize_flat``; its torch reference on CPU), the FP8 codes and block scales are copied into
their destinations with a few large copies (placements that continue each other in the output and in the
destination merge into one run; for Qwen3-MoE a layer's 384 expert tensors become one run per stacked tensor),
the unquantized tensors the plan copies (norms, embeddings, lm_head, the router: ``direct_sync_plan.Copy``) are
copied into their parameters as vLLM's loader would, and everything else is handed back for verl's own receiver
(one ``load_weights`` call costs ~14 ms whatever it loads, docs/results.md#weight-sync). The copy runs are built
once per bucket layout and cached: the layout repeats at every sync. There is no per-tensor Python after the first sync and no
intermediate per-tensor FP8 copy; what remains is the post-load processing verl runs after the last bucket.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fp8spec.runtime.quantization import blockquant as _ref
from fp8spec.runtime.quantization.bucket_plan import aligned, make_flat_plan
from fp8spec.runtime.quantization.triton_blockquant import (
    ROUND_CODE,
    get_kernel,
    quantize_flat,
    quantize_flat_into,
)
from fp8spec.runtime.weight_sync.receiver.direct_sync_plan import Copy, Placement, Planner

log = logging.getLogger("fp8spec.runtime.weight_sync.receiver.direct_sync")


@dataclass(frozen=True)
class Run:
    """One copy: ``rows x cols`` elements from the flat output (row stride ``src_ld``) into a parameter."""

    param: str
    dst: int  # element offset in the parameter's storage
    dst_ld: int  # its row stride
    src: int
    src_ld: int
    rows: int
    cols: int
    scale: bool  # from the scale output (float32) instead of the FP8 codes

    def contiguous(self) -> bool:
        return self.cols == self.dst_ld == self.src_ld or self.rows == 1


def _dst_offset(shape: Sequence[int], expert: int | None, r0: int, c0: int) -> tuple[int, int]:
    rows, cols = shape[-2], shape[-1]
    return (expert or 0) * rows * cols + r0 * cols + c0, cols


def runs_for(
    placements: Sequence[Placement],
    shapes: Sequence[Sequence[int]],
    y_starts: Sequence[int],
    s_starts: Sequence[int],
    param_shapes: Mapping[str, Sequence[int]],
    block: tuple[int, int],
) -> list[Run]:
    """Copy runs for one bucket layout; consecutive full-row copies into one parameter merge."""
    out: list[Run] = []
    last: dict[tuple[str, bool], int] = {}
    for p, shp, ys, ss in zip(placements, shapes, y_starts, s_starts):
        n = int(shp[1])
        gn = -(-n // block[1])
        for scale, src, dst, start, ld, pname in (
            (False, p.src, p.dst, ys, n, p.param),
            (True, p.src_s, p.dst_s, ss, gn, p.scale),
        ):
            d, dld = _dst_offset(param_shapes[pname], p.expert, dst.r0, dst.c0)
            run = Run(pname, d, dld, start + src.r0 * ld + src.c0, ld, src.rows, src.cols, scale)
            j = last.get((pname, scale))  # codes and scales interleave: merge with the same kind's last run
            prev = out[j] if j is not None else None
            assert j is None or prev is not None
            if (
                prev is not None
                and prev.contiguous()
                and run.contiguous()
                and prev.dst + prev.rows * prev.cols == run.dst
                and prev.src + prev.rows * prev.cols == run.src
            ):
                out[j or 0] = Run(
                    pname,
                    prev.dst,
                    prev.dst_ld,
                    prev.src,
                    prev.src_ld,
                    1,
                    prev.rows * prev.cols + run.rows * run.cols,
                    scale,
                )
            else:
                last[(pname, scale)] = len(out)
                out.append(run)
    # flatten full-row runs to 1-D (one contiguous copy each)
    return [
        Run(r.param, r.dst, r.cols * r.rows, r.src, r.cols * r.rows, 1, r.rows * r.cols, r.scale)
        if r.contiguous()
        else r
        for r in out
    ]


def copy_runs(
    runs: Sequence[Run], y: torch.Tensor, s: torch.Tensor, flat_params: Mapping[str, torch.Tensor]
) -> None:
    for r in runs:
        src = s if r.scale else y
        dst = flat_params[r.param]
        if r.rows == 1:
            dst[r.dst : r.dst + r.cols].copy_(src[r.src : r.src + r.cols])
        else:
            torch.as_strided(dst, (r.rows, r.cols), (r.dst_ld, 1), r.dst).copy_(
                torch.as_strided(src, (r.rows, r.cols), (r.src_ld, 1), r.src)
            )


@dataclass(frozen=True)
class IntoParams:
    """Where a plan's matrices land in the parameters, pointer-free: per matrix the index of its FP8 parameter and
    of its scale parameter in ``names``, and the element offset of its region in each (``into_params_layout``)."""

    names: tuple[str, ...]
    q_param: torch.Tensor  # int64 per matrix
    q_offset: torch.Tensor
    s_param: torch.Tensor
    s_offset: torch.Tensor


def into_params_layout(
    plan: Any,
    places: Sequence[Placement],
    shapes: Sequence[Sequence[int]],
    params: Mapping[str, tuple[Sequence[int], str]],
) -> IntoParams | None:
    """Where ``plan``'s outputs land in the parameters (``params``: name -> (shape, dtype), the planner's), or None
    unless every placement takes its whole source tensor into one contiguous region of its parameter with the same
    row length (TP1 fused parts and stacked experts do; a column shard of a row-parallel layer does not), FP8 codes
    and float32 scales. Built once per plan; ``into_params_meta`` adds the addresses of a binding."""
    names: dict[str, int] = {}
    qp, qo, sp, so = [], [], [], []
    for p, shp in zip(places, shapes):
        if len(shp) != 2:
            return None
        m, n = int(shp[0]), int(shp[1])
        gm, gn = -(-m // plan.block[0]), -(-n // plan.block[1])
        if (p.src.r0, p.src.c0, p.src.rows, p.src.cols) != (0, 0, m, n):
            return None
        if (p.src_s.r0, p.src_s.c0, p.src_s.rows, p.src_s.cols) != (0, 0, gm, gn):
            return None
        if (p.dst.rows, p.dst.cols) != (m, n) or (p.dst_s.rows, p.dst_s.cols) != (gm, gn):
            return None
        if params[p.param][1] != "float8_e4m3fn" or params[p.scale][1] != "float32":
            return None
        d, dld = _dst_offset(params[p.param][0], p.expert, p.dst.r0, p.dst.c0)
        e, eld = _dst_offset(params[p.scale][0], p.expert, p.dst_s.r0, p.dst_s.c0)
        if dld != n or eld != gn:
            return None
        qp.append(names.setdefault(p.param, len(names)))
        sp.append(names.setdefault(p.scale, len(names)))
        qo.append(d)
        so.append(e)
    t = plan.mat_tensor  # one row per matrix; every tensor here is one matrix (2-D)

    def per_matrix(v: list[int]) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.int64)[t]

    return IntoParams(tuple(names), per_matrix(qp), per_matrix(qo), per_matrix(sp), per_matrix(so))


def into_params_meta(
    plan: Any,
    into: IntoParams,
    flat_params: Mapping[str, torch.Tensor],
    bases: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor | None:
    """``plan``'s matrix table (CPU, with its input columns) with the output columns pointing into this binding's
    parameters: element offsets from ``bases`` (fp8, float32), so the kernel writes the codes and scales where
    vLLM's loaders would copy them; None where a parameter is not bound flat or a scale is not 4-byte aligned."""
    tensors = [flat_params.get(n) for n in into.names]
    if any(t is None for t in tensors):
        return None
    addr = torch.tensor([t.data_ptr() for t in tensors if t is not None], dtype=torch.int64)
    y = addr[into.q_param] + into.q_offset - bases[0].data_ptr()
    s_bytes = addr[into.s_param] + 4 * into.s_offset - bases[1].data_ptr()
    if bool((s_bytes % 4).any()):
        return None
    x_offsets = plan.x_offsets
    meta = plan.meta_with_inputs(x_offsets) if x_offsets is not None else plan.meta_cpu.clone()
    meta[:, 1], meta[:, 2] = y, s_bytes // 4
    return meta


class _Layout:
    def __init__(self, idx, plan, runs, shapes, places, n, copies=()):
        self.idx, self.plan, self.runs, self.shapes, self.places = idx, plan, runs, shapes, places
        self.copies = list(copies)  # (index in the bucket, destination parameter) of the plain copies
        covered = set(idx) | {i for i, _ in self.copies}
        self.rest = [i for i in range(n) if i not in covered]  # what verl's loader takes, in order
        # bucket metadata message -> (dtype, element offsets, plan, runs, extent) reading verl's buffer in place
        self.in_place: dict[Any, tuple] = {}


class DirectSync:
    """Quantize covered tensors of each bucket into the engine's parameters; return the rest for verl.

    ``params``: the engine's parameters by name, bound per sync (verl's staging swaps parameters before the first
    bucket, ``vllm_fp8_utils.stage_fp8_params_for_loading``); ``dtype``: the engine's weight dtype, which verl
    casts every tensor to before quantizing (``vllm_quant_utils.py`` line 393: ``v.to(dtype)``)."""

    def __init__(
        self,
        planner: Planner,
        dtype: torch.dtype = torch.bfloat16,
        scale_fmt: str = "fp32",
        amax_floor: float = _ref.DEFAULT_AMAX_FLOOR,
        on_left_out: Callable[[str, str], None] | None = None,
        round_in_kernel: bool = True,
        into_params: bool = False,
    ):
        self.planner, self.dtype, self.scale_fmt, self.amax_floor = planner, dtype, scale_fmt, amax_floor
        # float32 buckets read in place: rounded to ``dtype`` by the quantizer as it loads, instead of a cast
        # copy of the bucket first (the same values: both round to nearest even)
        self.round_in_kernel = round_in_kernel
        # quantize straight into the bound parameters where every placement of a bucket is one contiguous
        # [rows, N] region of its parameter (``into_params_meta``), instead of into staging outputs and copy runs
        self.into_params = into_params
        self._into: dict[int, tuple] = {}  # id(plan) -> (plan, (device meta, aligned) or None), per binding
        self._into_layouts: dict[int, tuple] = {}  # id(plan) -> (plan, IntoParams or None), once
        self._bases: tuple[torch.Tensor, torch.Tensor] | None = None
        self._bound_ptrs: tuple = ()
        self.on_left_out = on_left_out or (
            lambda name, why: log.info("direct_sync: %s -> verl (%s)", name, why)
        )
        self._layouts: dict[tuple, _Layout] = {}
        self._flat: dict[str, torch.Tensor] = {}
        self._whole: dict[str, torch.Tensor] = {}  # the plain copies' destinations
        self.stats = {
            "buckets": 0,
            "layouts": 0,
            "direct_tensors": 0,
            "copied_tensors": 0,
            "fallback_tensors": 0,
            "copies": 0,
            "in_place": 0,
            "rounded_in_kernel": 0,
            "into_params": 0,
        }

    def bind(self, params: Mapping[str, torch.Tensor]) -> None:
        """The destination storage for this sync; each planned parameter must match its planned shape and dtype."""
        flat, whole = {}, {}
        for name, (shape, dtype) in self.planner.params.items():
            t = params.get(name)
            if t is None or tuple(t.shape) != tuple(shape) or str(t.dtype).replace("torch.", "") != dtype:
                continue
            whole[name] = t.data
            if t.is_contiguous():
                flat[name] = t.data.view(-1)
        self._flat, self._whole = flat, whole
        if self.into_params:
            # a parameter re-allocated since the last binding (verl's staging): the output tables point elsewhere
            ptrs = tuple((n, t.data_ptr()) for n, t in flat.items())
            if ptrs != self._bound_ptrs:
                self._bound_ptrs, self._into = ptrs, {}

    def _layout(self, weights: Sequence[tuple[str, torch.Tensor]], bucket: Any = None) -> _Layout:
        # the bucket's metadata bytes (equal bytes: equal names, shapes, dtypes) key it without reading a tensor,
        # so lazily built views (lazy_receive.BucketViews) stay unbuilt for the covered tensors. Not for a
        # one-tensor message: verl sends a tensor larger than a bucket alone with a fresh CUDA IPC handle in its
        # metadata every sync (bucketed_weight_transfer.py 223-237), whose bytes would key a new layout each time
        if bucket is not None and bucket.weights is weights and bucket.raw is not None and len(weights) > 1:
            key: Any = bucket.layout_key(True)
        else:
            key = tuple((n, tuple(t.shape)) for n, t in weights)
        lay = self._layouts.get(key)
        if lay is not None:
            return lay
        idx, places, shapes, copies = [], [], [], []
        for i, (name, t) in enumerate(weights):
            if t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
                continue
            p = self.planner.place(name, t.shape)
            if p is None:
                self.on_left_out(name, self.planner.plan.left_out.get(name, "?"))
            elif isinstance(p, Copy):
                if p.param in self._whole:
                    copies.append((i, p.param))
            elif p.param in self._flat and p.scale in self._flat:
                idx.append(i)
                places.append(p)
                shapes.append(tuple(t.shape))
        offsets, pos = [], 0
        for shp in shapes:
            offsets.append(pos)
            pos += shp[0] * shp[1]
        bplan = make_flat_plan(shapes, offsets, self.planner.block, weights[0][1].device) if shapes else None
        pshapes = {k: v[0] for k, v in self.planner.params.items()}
        runs = (
            runs_for(places, shapes, bplan.y_starts, bplan.s_starts, pshapes, self.planner.block)
            if bplan
            else []
        )
        lay = _Layout(idx, bplan, runs, shapes, places, len(weights), copies)
        self._layouts[key] = lay
        self.stats["layouts"] += 1
        return lay

    def _in_place(self, lay: _Layout, weights: Sequence[tuple[str, torch.Tensor]], bucket: Any):
        """``(input, plan, runs)`` reading the covered tensors where verl's receiver holds them (its one flat
        buffer, ``bucket``: a ``flat_bucket.ReceivedBucket``), or None where they are not all views of it in
        one dtype. The offsets come from the bucket's metadata, checked against each view's address."""
        if bucket is None or bucket.weights is not weights:
            return None
        # the same metadata message (verl repeats it every sync) gives the same offsets: read them once
        key = bucket.layout_key(True)
        got = lay.in_place.get(key)
        if got is None:
            got = self._in_place_plan(lay, weights, bucket)
            if got is None:
                return None
            lay.in_place[key] = got
        src, offsets, plan, runs, start, extent = got
        base = bucket.buffer.data_ptr()
        for i, off in ((lay.idx[0], offsets[0]), (lay.idx[-1], offsets[-1])):  # this list views this buffer
            if weights[i][1].data_ptr() != base + off * src.itemsize:
                return None
        # the cast (float32 buckets) is verl's v.to(dtype): in the quantizer (round_to), or once over the covered
        # extent of the buffer
        if self.round_in_kernel and src == torch.float32 and self.dtype in ROUND_CODE:
            return bucket.flat(src, src, extent, start), plan, runs, self.dtype
        return bucket.flat(src, self.dtype, extent, start), plan, runs, None

    def _in_place_plan(self, lay: _Layout, weights: Sequence[tuple[str, torch.Tensor]], bucket: Any):
        """``(dtype, offsets, plan, runs, start, extent)`` for a layout read in place, or None where a covered
        tensor is not a view of the buffer at its metadata offset in the one dtype. The plan reads the buffer
        from ``start`` (the first covered element): a pipelined sender (``fused_send``) fills the other half."""
        src = weights[lay.idx[0]][1].dtype
        base = bucket.buffer.data_ptr()
        offsets = []
        for i in lay.idx:
            name, t = weights[i]
            m = bucket.meta.get(name)
            if m is None or m.get("handle") is not None or t.dtype != src or m["offset"] % src.itemsize:
                return None
            if t.data_ptr() != base + m["offset"]:
                return None
            offsets.append(m["offset"] // src.itemsize)
        start = min(offsets)
        plan = make_flat_plan(
            lay.shapes, [o - start for o in offsets], self.planner.block, bucket.buffer.device
        )
        pshapes = {k: v[0] for k, v in self.planner.params.items()}
        runs = runs_for(lay.places, lay.shapes, plan.y_starts, plan.s_starts, pshapes, self.planner.block)
        extent = start + plan.x_extent
        return src, offsets, plan, runs, start, extent

    def _into_params(self, plan: Any, lay: _Layout) -> tuple[torch.Tensor, bool] | None:
        """The device table for quantizing ``plan`` straight into the bound parameters: where its outputs land,
        found once per plan, and their addresses once per binding; None where a placement does not allow it
        (or without the Triton kernel)."""
        got = self._into.get(id(plan))
        if got is not None:
            return got[1]
        if get_kernel() is None or not self._flat:
            return None
        found = self._into_layouts.get(id(plan))
        if found is None:
            found = self._into_layouts[id(plan)] = (
                plan,
                into_params_layout(plan, lay.places, lay.shapes, self.planner.params),
            )
        if self._bases is None:
            device = next(iter(self._flat.values())).device
            self._bases = (
                torch.empty(16, dtype=_ref.FP8_DTYPE, device=device),
                torch.empty(4, dtype=torch.float32, device=device),
            )
        into = found[1]
        meta = None if into is None else into_params_meta(plan, into, self._flat, self._bases)
        dev = None if meta is None else (meta.to(plan.device), aligned(meta))
        self._into[id(plan)] = (plan, dev)
        return dev

    def apply(
        self, weights: Sequence[tuple[str, torch.Tensor]], bucket: Any = None
    ) -> list[tuple[str, torch.Tensor]]:
        """Quantize the covered tensors of one bucket into the bound parameters; returns the others, in order.

        ``bucket``: the receiver's flat buffer and metadata for this list (``FlatBucketEngine.bucket``): the
        covered tensors are then quantized where they lie, with no gathering copy."""
        self.stats["buckets"] += 1
        if not weights:
            return []
        lay = self._layout(weights, bucket)
        unbound = []  # a copy destination this sync's parameters lack (re-laid out since): verl loads it
        for i, param in lay.copies:  # vLLM's loader for these: param.data.copy_(loaded_weight)
            dst = self._whole.get(param)
            if dst is None or dst.shape != weights[i][1].shape:
                unbound.append(i)
                continue
            dst.copy_(weights[i][1])
        self.stats["copied_tensors"] += len(lay.copies) - len(unbound)
        rest = [weights[i] for i in (sorted(lay.rest + unbound) if unbound else lay.rest)]
        if not lay.idx:
            self.stats["fallback_tensors"] += len(rest)
            return rest
        found = self._in_place(lay, weights, bucket)
        round_to = None
        if found is not None:
            flat, plan, runs, round_to = found
            self.stats["in_place"] += 1
            self.stats["rounded_in_kernel"] += round_to is not None
        else:  # one gathered input in the engine's dtype (verl's v.to(dtype) per tensor)
            flat = torch.cat([weights[i][1].reshape(-1).to(self.dtype) for i in lay.idx])
            plan, runs = lay.plan, lay.runs
        into = self._into_params(plan, lay) if self.into_params and flat.is_cuda else None
        if into is not None:
            meta, is_aligned = into
            assert self._bases is not None
            quantize_flat_into(
                flat, plan, meta, is_aligned, self._bases, self.scale_fmt, self.amax_floor, round_to
            )
            self.stats["into_params"] += 1
        else:
            out = quantize_flat(flat, plan, self.scale_fmt, self.amax_floor, views=False, round_to=round_to)
            assert isinstance(out, tuple)  # views=False: the two flat output buffers
            copy_runs(runs, out[0], out[1], self._flat)
        self.stats["direct_tensors"] += len(lay.idx)
        self.stats["fallback_tensors"] += len(rest)
        self.stats["copies"] += len(runs)
        return rest
