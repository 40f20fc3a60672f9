"""fast_block_quant, vLLM worker: quantize each received weight-sync bucket with one launch on verl's flat buffer.

How a bucket reaches ``quant_weights`` in the vLLM worker (verl 0.9.1, IPC path):
  BucketedWeightSender.async_send_weights (bucketed_weight_transfer.py 102-164) copies each
  (name, tensor) of the trainer's stream into ONE flat uint8 buffer at a byte offset aligned to the
  tensor's element size (127-130, 155-158) and sends {"bucket_meta": {name: {name, shape, dtype,
  offset, handle: None}}, "is_last"} with send_pyobj (133-135, 148-154, 163); a tensor larger than
  the bucket goes alone with a CUDA IPC handle instead (140-146, 223-237).
  BucketedWeightReceiver.receive_weights (269-309) maps the sender's buffer once (_init_buffer,
  316-330), and per bucket recv_pyobj's the metadata (286) and builds each tensor as a view of that
  buffer, ``self.buffer[offset : offset + size].view(dtype=dtype).view(shape)`` (288-298; with
  use_shm the views are copied to the device one by one, 296-297), then calls
  on_bucket_received(weights, is_last) (300) and synchronizes (301).
  vLLMColocateWorkerExtension.update_weights_from_ipc's callback (utils.py 307-324) ->
  _update_weights (367) -> split_buffer_updates (387; weight_update_utils.py 20-35, same tensor
  objects) -> load_quanted_weights (393, and 396 for an MTP drafter; vllm_quant_utils.py 439) ->
  list(weights) (452) -> quant_weights (453) -> model.load_weights (474).
So the tensors quant_weights gets are views into one flat buffer whose layout the metadata describes. The
receiver patch (``weight_sync.receiver.flat_receive.patch_bucket_receiver``) records the metadata message and the buffer
(``FlatBucketEngine.received_bucket``); quant_weights then quantizes the selected tensors with ONE launch on
that buffer, through a ``BucketPlan`` cached by layout (the metadata repeats every step).

An FSDP trainer streams its float32 master weights, so its buckets hold float32 tensors while verl quantizes
``v.to(bfloat16)`` (vllm_quant_utils.py 392). Such a bucket is cast to the quantization dtype in one
elementwise op over the whole buffer (the same rounding as verl's per-tensor cast) and the cast copy is
quantized with the same plan: element offsets do not change with the element size.

All state (cached layouts, the reused output memory, counters, the output policy, the bucket being received)
lives in one ``FlatBucketEngine``; the patches of a process share ``ENGINE``.
"""

from __future__ import annotations

import contextlib
import operator
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Callable, cast

import torch

from fp8spec.runtime.quantization import blockquant
from fp8spec.runtime.quantization import flat_launcher as _fl
from fp8spec.runtime.quantization import triton_blockquant as _tbq
from fp8spec.runtime.quantization.bucket_plan import BucketPlan, make_flat_plan, same_device
from fp8spec.runtime.settings import QuantSettings

FLAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# (bucket dtype, quantization dtype) pairs the flat path casts on the whole buffer, as verl casts each tensor
CASTS = {(torch.float32, torch.bfloat16), (torch.float32, torch.float16)}
_SECOND = operator.itemgetter(1)
Named = tuple[str, torch.Tensor]


class ReceivedBucket:
    """One bucket as verl's receiver holds it: its flat uint8 ``buffer``, the ``bucket_meta`` dict (in
    the receiver's order), the raw pickled metadata message when known (the layout key), and the
    receiver's ``[(name, view), …]`` list."""

    __slots__ = ("_cast", "_key", "_lean_key", "_typed", "buffer", "meta", "raw", "weights")

    def __init__(self, buffer: torch.Tensor, meta: dict, weights: list, raw: bytes | None = None):
        self.buffer, self.meta, self.weights, self.raw = buffer, meta, weights, raw
        self._key: tuple | None = None
        self._lean_key: RawKey | None = None
        self._typed: dict[torch.dtype, torch.Tensor] = {}
        self._cast: dict[tuple[torch.dtype, torch.dtype, int], torch.Tensor] = {}

    def layout_key(self, lean: bool) -> Any:
        """``key``, or with ``lean`` the same bytes behind a hash of their length and ends (see RawKey)."""
        if not lean or self.raw is None:
            return self.key
        if self._lean_key is None:
            self._lean_key = RawKey(self.raw)
        return self._lean_key

    @property
    def key(self) -> tuple:
        """Layout key: the exact metadata bytes verl sent (equal bytes = equal names, shapes, dtypes,
        offsets), or a tuple built from the decoded metadata when the bytes are not at hand."""
        if self._key is None:
            if self.raw is not None:
                self._key = ("raw", self.raw)
            else:
                self._key = ("meta",) + tuple(
                    (n, tuple(m["shape"]), m["dtype"], m["offset"], m.get("handle") is None)
                    for n, m in self.meta.items()
                )
        return self._key

    def typed(self, dtype: torch.dtype) -> torch.Tensor:
        t = self._typed.get(dtype)
        if t is None:
            es = dtype.itemsize
            n = self.buffer.numel()
            t = self._typed[dtype] = self.buffer[: n - n % es].view(dtype)
        return t

    def flat(self, src: torch.dtype, dtype: torch.dtype, extent: int, start: int = 0) -> torch.Tensor:
        """The buffer's elements ``start:`` as ``src``, cast to ``dtype`` when they differ: then only up to
        ``extent`` (what the plan reads; a bucket is often not full, and a pipelined sender fills one half of the
        buffer while the engine reads the other), once per bucket, the copy living as long as this bucket.
        Element ``i`` of the result is element ``start + i`` of the buffer."""
        if src == dtype:
            return self.typed(dtype)[start:] if start else self.typed(dtype)
        t = self._cast.get((src, dtype, start))
        if t is None or t.numel() < extent - start:
            t = self._cast[(src, dtype, start)] = self.typed(src)[start:extent].to(dtype)
        return t


class RawKey:
    """A metadata message as a dict key that hashes only its length and its first and last bytes
    (the last entries' names and offsets differ from bucket to bucket) instead of all ~60 KB of it
    (Python hashes bytes with SipHash, ~15 us for a Qwen3-30B-A3B bucket on a 2-core box); equality
    still compares every byte (memcmp), so a key matches exactly the same message."""

    __slots__ = ("_h", "raw")

    def __init__(self, raw: bytes):
        self.raw = raw
        self._h = hash((len(raw), raw[:128], raw[-512:]))

    def __hash__(self) -> int:
        return self._h

    def __eq__(self, other: object) -> bool:
        return type(other) is RawKey and (self is other or (self._h == other._h and self.raw == other.raw))


def _picker(idx: Sequence[int]) -> Callable[[Sequence[Any]], tuple]:
    if len(idx) == 1:
        i = idx[0]
        return lambda seq: (seq[i],)
    return operator.itemgetter(*idx)


class FlatLayout:
    """The cached plan of one selection of one bucket layout, with its output views and launchers."""

    __slots__ = ("launchers", "mask", "outs", "pick_items", "pick_views", "plan", "sel", "src")

    def __init__(
        self,
        sel: tuple[int, ...],
        plan: BucketPlan,
        mask: tuple[bool, ...],
        pick_items: Callable,
        pick_views: Callable,
        src: torch.dtype = torch.bfloat16,
    ):
        self.sel, self.plan, self.mask, self.pick_items, self.pick_views = (
            sel,
            plan,
            mask,
            pick_items,
            pick_views,
        )
        self.src = src  # dtype of the selected tensors in the bucket (cast to the quantization dtype)
        self.outs: list | None = None
        self.launchers: dict[
            str, _fl.FlatLauncher
        ] = {}  # scale_fmt -> FlatLauncher into the reused output memory

    def fits(self, flat: torch.Tensor) -> bool:
        """O(1): the received buffer is long enough for the plan and on the plan's device."""
        return flat.numel() >= self.plan.x_extent and same_device(flat.device, self.plan.device)

    def same_tensors(self, items: Sequence[Named], views: Sequence[Named]) -> bool:
        """The selected items are (still) the receiver's views the plan was built from (C-level)."""
        return all(
            map(operator.is_, map(_SECOND, self.pick_items(items)), map(_SECOND, self.pick_views(views)))
        )


class OutputArena:
    """fp8 and float32 output storage of one device, shared by every cached layout.

    Each layout's per-tensor output views are made once (into this storage) and handed out again at
    every step, so the per-step cost does not grow with the number of tensors. Between weight-sync
    rounds the memory is given back with ``storage.resize_(0)`` and re-allocated with ``resize_(n)``
    at the next round's first bucket: the views keep pointing at the same storage object, as FSDP's
    flat-parameter views do. Contract (the same verl relies on for its BF16 path, where
    ``load_weights`` gets views of the receiver's buffer, bucketed_weight_transfer.py 295 and utils.py
    405, which the sender overwrites with the next bucket, line 155): ``load_weights`` copies what it
    is given and keeps no reference past the bucket (verl clones only for LoRA, which keeps tensors,
    utils.py 309-310, 374-376).
    """

    def __init__(self, device: torch.device):
        self.y = torch.empty(0, dtype=blockquant.FP8_DTYPE, device=device)
        self.s = torch.empty(0, dtype=torch.float32, device=device)

    @staticmethod
    def _grow(t: torch.Tensor, n: int) -> torch.Tensor:
        st = t.untyped_storage()
        if st.nbytes() < n * t.element_size():
            st.resize_(n * t.element_size())
        if t.numel() < n:
            t = torch.empty(0, dtype=t.dtype, device=t.device).set_(st, 0, (n,), (1,))
        return t

    def reserve(self, ny: int, ns: int) -> None:
        self.y, self.s = self._grow(self.y, ny), self._grow(self.s, ns)

    def ensure(self) -> None:
        """Memory back after ``release`` (O(1))."""
        for t in (self.y, self.s):
            st = t.untyped_storage()
            need = t.numel() * t.element_size()
            if st.nbytes() < need:
                st.resize_(need)

    def release(self) -> None:
        for t in (self.y, self.s):
            t.untyped_storage().resize_(0)


def _new_stats() -> dict[str, int]:
    return {
        "flat_launches": 0,
        "plan_builds": 0,
        "cache_hits": 0,
        "not_flat": 0,
        "list_path": 0,
        "spec_discarded": 0,
    }


class FlatBucketEngine:
    """Quantizes received buckets in place on the flat buffer: the layout cache, the reused output memory
    (given back after each round), counters (``stats``) and the bucket being received (per thread)."""

    def __init__(self, max_layouts: int = 4096):
        self.layouts: OrderedDict[Any, FlatLayout] = OrderedDict()
        self.max_layouts = max_layouts
        self.arenas: dict[torch.device, OutputArena] = {}
        self.stats = _new_stats()
        self._local = threading.local()

    # ------------------------------------------------------------------------------------ round and bucket
    @property
    def bucket(self) -> ReceivedBucket | None:
        return getattr(self._local, "bucket", None)

    @contextlib.contextmanager
    def received_bucket(
        self, buffer: torch.Tensor, meta: dict, weights: list, raw: bytes | None = None
    ) -> Iterator[ReceivedBucket]:
        """Make ``quant_weights`` calls inside this block see the bucket (set by the receiver patch)."""
        prev = self.bucket
        self._local.bucket = ReceivedBucket(buffer, meta, weights, raw)
        try:
            yield self._local.bucket
        finally:
            self._local.bucket = prev

    def release_outputs(self) -> None:
        """Give back the reused output memory (called when verl's receiver cleans up after a round)."""
        for dev, arena in self.arenas.items():
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            arena.release()

    def clear(self) -> None:
        """Forget every layout and give back every output memory."""
        self.release_outputs()
        self.layouts.clear()
        self.arenas.clear()

    def reset_stats(self) -> None:
        self.stats.update(_new_stats())

    # ------------------------------------------------------------------------------------ quantization
    def speculate(
        self, items: Sequence[Named], dtype: torch.dtype, block: tuple[int, int], settings: QuantSettings
    ) -> tuple[FlatLayout, list] | None:
        """Launch before verl's per-tensor selection runs, when this bucket's layout is cached: the GPU
        quantizes while the host classifies. ``quantize`` then checks the selection is the cached one
        (else the launch is redone for the new selection; its outputs are overwritten).

        With ``lean_prelaunch`` the layout key is a ``RawKey`` and the check that the selected tensors
        are the receiver's views (O(tensors)) runs after the launch, while the GPU works: if it fails the
        launch is discarded (it read the received buffer inside its bounds and wrote only the reused
        output memory, which nothing holds between buckets) and the bucket takes the list path."""
        ctx = self._bucket_for(settings)
        if ctx is None:
            return None
        lean = settings.lean_prelaunch
        lay = self.layouts.get((ctx.layout_key(lean), len(items), dtype, block))
        if lay is None:
            return None
        if not lean:
            if not lay.same_tensors(items, ctx.weights):
                return None
            return lay, self._launch(ctx, lay, dtype, settings)
        flat = ctx.flat(lay.src, dtype, lay.plan.x_extent)
        if not lay.fits(flat):
            return None
        outs = self._launch(ctx, lay, dtype, settings, flat)
        if not lay.same_tensors(items, ctx.weights):
            self.stats["spec_discarded"] += 1
            return None
        return lay, outs

    def quantize(
        self,
        items: Sequence[Named],
        sel: tuple[int, ...],
        dtype: torch.dtype,
        block: tuple[int, int],
        settings: QuantSettings,
        spec: tuple[FlatLayout, list] | None = None,
    ) -> tuple[tuple[bool, ...], list] | None:
        """Quantize ``items[i]`` for i in ``sel`` with one launch on the received bucket's flat buffer.

        Returns ``(mask, [(q, scale_inv), …])`` or None (then the caller takes the list path). Per call,
        with the layout cached: one dict lookup keyed by the metadata bytes (hashed in C), a C-level
        identity check that the selected tensors are the receiver's views, one launch (already made by
        ``speculate``)."""
        if spec is not None and spec[0].sel == sel:
            self.stats["cache_hits"] += 1
            return spec[0].mask, spec[1]
        ctx = self._bucket_for(settings)
        if ctx is None or not sel:
            return None
        key = (ctx.layout_key(settings.lean_prelaunch), len(items), dtype, block)
        if spec is None and key in self.layouts:
            self.stats["not_flat"] += 1  # same metadata, but not the receiver's tensors: do not trust it
            return None
        lay = self._build_layout(ctx, items, sel, dtype, block, settings)  # new layout, or new selection
        if lay is None:
            self.stats["not_flat"] += 1
            return None
        self.stats["plan_builds"] += 1
        self.layouts[key] = lay
        if len(self.layouts) > self.max_layouts:
            self.layouts.popitem(last=False)
        return lay.mask, self._launch(ctx, lay, dtype, settings)

    def _bucket_for(self, settings: QuantSettings) -> ReceivedBucket | None:
        ctx = self.bucket
        if ctx is None or settings.backend == "reference":
            return None
        if settings.backend == "triton" and _tbq.get_kernel() is None:
            return None  # the list path raises the usual error
        return ctx

    def _build_layout(
        self,
        ctx: ReceivedBucket,
        items: Sequence[Named],
        sel: tuple[int, ...],
        dtype: torch.dtype,
        block: tuple[int, int],
        settings: QuantSettings,
    ) -> FlatLayout | None:
        """The cached layout of ``items[sel]`` in the received bucket, or None when they are not views of
        the bucket's one flat buffer, all of one dtype (the quantization dtype, or one ``CASTS`` casts to it),
        at the offsets the metadata gives."""
        if dtype not in FLAT_DTYPES or not sel:
            return None
        src = items[sel[0]][1].dtype
        if src != dtype and (src, dtype) not in CASTS:
            return None
        buf = ctx.buffer
        if (
            not isinstance(buf, torch.Tensor)
            or buf.dtype != torch.uint8
            or buf.dim() != 1
            or not buf.is_contiguous()
        ):
            return None
        metas = list(ctx.meta.values())
        views = ctx.weights
        if len(metas) != len(views):
            return None
        pos = {id(t): j for j, (_, t) in enumerate(views)}
        es = src.itemsize
        base, nbytes = buf.data_ptr(), buf.numel()
        shapes, offs, w_idx = [], [], []
        for i in sel:
            t = items[i][1]
            j = pos.get(id(t))
            if j is None:
                return None  # not the receiver's view (replaced on the way, or another list)
            m = metas[j]
            shape, off = tuple(m["shape"]), m["offset"]
            if (
                m.get("handle") is not None  # sent alone through its own IPC handle
                or m["dtype"] != src  # mixed dtypes: the list path casts each tensor like verl
                or t.dtype != src
                or len(shape) < 2
                or tuple(t.shape) != shape
                or off % es
                or off + t.numel() * es > nbytes
                or not t.is_contiguous()
                or t.device != buf.device
                or t.data_ptr() != base + off
            ):
                return None
            shapes.append(shape)
            offs.append(off // es)
            w_idx.append(j)
        plan = make_flat_plan(shapes, offs, block, buf.device)
        mask = [False] * len(items)
        for i in sel:
            mask[i] = True
        lay = FlatLayout(sel, plan, tuple(mask), _picker(sel), _picker(w_idx), src)
        if settings.reuse_outputs:
            arena = self.arenas.get(buf.device)
            if arena is None:
                arena = self.arenas[buf.device] = OutputArena(buf.device)
            arena.reserve(plan.y_total, plan.s_total)
            arena.ensure()
            lay.outs = plan.outputs(arena.y[: plan.y_total], arena.s[: plan.s_total])
        return lay

    def _launch(
        self,
        ctx: ReceivedBucket,
        lay: FlatLayout,
        dtype: torch.dtype,
        settings: QuantSettings,
        flat: torch.Tensor | None = None,
    ) -> list:
        if flat is None:
            flat = ctx.flat(lay.src, dtype, lay.plan.x_extent)
        fmt = settings.scale_fmt
        self.stats["flat_launches"] += 1
        if lay.outs is None:
            return cast(list, _tbq.quantize_flat(flat, lay.plan, scale_fmt=fmt))  # views=True: a list
        arena = self.arenas[flat.device]
        arena.ensure()
        if settings.fast_launch:
            launcher = lay.launchers.get(fmt)
            if launcher is None:
                launcher = lay.launchers[fmt] = _fl.FlatLauncher(lay.plan, (arena.y, arena.s), fmt, fast=True)
            launcher(flat)
        else:
            _tbq.quantize_flat(flat, lay.plan, scale_fmt=fmt, views=False, out=(arena.y, arena.s))
        return lay.outs


def emit_flat(items: Sequence[Named], mask: Sequence[bool], outs: list) -> Iterator[Named]:
    """verl's output order: each quantized weight followed by its ``<name>_scale_inv``, the rest as they came."""
    it = iter(outs)
    scale_name = blockquant.scale_name
    for (k, v), m in zip(items, mask):
        if m:
            q, s = next(it)
            yield (k, q)
            yield (scale_name(k), s)
        else:
            yield (k, v)


ENGINE = FlatBucketEngine()  # the one the patches of this process use
