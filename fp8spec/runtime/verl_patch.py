"""verl 0.9.1 hook points of the runtime patches (installed lazily by ``fp8spec.runtime.activate``).

How weights travel in verl 0.9.1 (read in the installed package):

* Trainer: ``ActorRolloutRefWorker.update_weights`` (``verl/workers/engine_workers.py`` line 728)
  takes ``per_tensor_param, peft_config = self.actor.engine.get_per_tensor_param(...)`` — a generator
  of ``(hf_name, bf16 tensor)`` that every trainer rank iterates — and hands it either to
  ``self.rollout.update_weights`` (colocated, "naive") or to ``self.checkpoint_engine.send_weights``.
  Extra ``(name, tensor)`` pairs appended to that generator travel with the weights.
* vLLM rollout: the tensors reach the vLLM worker's ``vLLMColocateWorkerExtension._update_weights``
  in buckets (``verl/workers/rollout/vllm_rollout/utils.py``: ``update_weights_from_ipc`` line 248, ``_update_weights`` line 367); with
  ``rollout.quantization=fp8`` the BF16 weights are quantized *there*, per tensor, by
  ``verl.utils.vllm.vllm_quant_utils.quant_weights`` (line 346, ``scaled_fp8_blockwise`` at 392,
  ``<name>_scale_inv`` at 404), called from ``load_quanted_weights`` (line 439).
* SGLang rollout: ``ServerAdapter.update_weights`` (``verl/workers/rollout/sglang_rollout/sglang_rollout.py``
  line 305, quantization at lines 360-370) quantizes in the trainer process with ``FP8QuantizerHelper.quant_weights_by_name``
  (``verl/utils/fp8_utils.py`` line 86), then buckets and posts ``update_weights_from_tensor``.
* Forward passes on the actor: ``ActorRolloutRefWorker.compute_log_prob`` calls
  ``self.actor.infer_batch`` (line 703-706), ``update_actor`` calls ``self.actor.train_mini_batch``
  (line 713-716); ``self.actor.engine.module`` is the HF (FSDP) module or the list of Megatron chunks.

Patches:

* ``kv_scales`` (trainer): after ``init_model`` a ``KVScaleCalibrator`` is attached to the actor
  module, ``infer_batch``/``train_mini_batch`` of that actor instance arm it, and the engine's
  ``get_per_tensor_param`` (instance attribute) appends the all-reduced scales to the weight stream
  (vLLM); for SGLang they are posted after the weight update with the fp8spec custom loader.
* ``kv_scales`` (vLLM worker): ``engines.vllm_kv.patch_verl_worker_extension``.
* ``fast_block_quant`` / ``ue8m0_scales``: ``vllm_quant_utils.quant_weights`` and
  ``FP8QuantizerHelper.quant_weights_by_name`` replaced by bucketed versions that keep verl's own
  weight selection (``_classify_quant_weight`` / ``should_quantize_param``) and output order. In the
  vLLM worker, ``BucketedWeightReceiver`` (``bucketed_weight_transfer.py``) is wrapped so that
  ``quant_weights`` sees each received bucket's flat buffer and metadata and quantizes the bucket with
  one launch through a plan cached by layout; the tensor-list path is the fallback. The flat path's
  per-bucket host overhead is governed by ``FLAT_KNOBS`` (lean pre-launch path and the compiled
  kernel's runner on by default; pre-allocated / kept output memory opt-in; BENCHMARKS.md section 3).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import pickle
import threading
import time
from collections import OrderedDict
from itertools import compress, repeat

import torch

from . import blockquant
from . import triton_blockquant as _tbq
from .kv_calibration import VLLM_CALC_DIVISORS, KVScaleCalibrator, num_layers_of
from .manifest import ENV_KV_RECALIBRATE, SGLANG_KV_LOADER
from .triton_blockquant import quantize_bucket

logger = logging.getLogger(__name__)

MOD_ENGINE_WORKERS = "verl.workers.engine_workers"
MOD_VLLM_EXT = "verl.workers.rollout.vllm_rollout.utils"
MOD_VLLM_QUANT = "verl.utils.vllm.vllm_quant_utils"
MOD_FP8_UTILS = "verl.utils.fp8_utils"
MOD_BUCKET_TRANSFER = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"


# ------------------------------------------------------------------------------------------ config
def kv_divisors_from_env():
    v = os.environ.get("FP8SPEC_KV_SCALE_DIVISORS", "vllm").strip()
    if v in ("vllm", ""):
        return VLLM_CALC_DIVISORS
    if v == "fp8_max":
        return "fp8_max"
    parts = [float(p) for p in v.split(",")]
    if len(parts) != 3:
        raise ValueError(f"FP8SPEC_KV_SCALE_DIVISORS must be vllm, fp8_max or 'q,k,v', got {v!r}")
    return tuple(parts)


def kv_phases_from_env():
    v = os.environ.get("FP8SPEC_KV_CALIB_PHASES", "compute_log_prob,update_actor")
    phases = {p.strip() for p in v.split(",") if p.strip()}
    bad = phases - {"compute_log_prob", "update_actor"}
    if bad:
        raise ValueError(f"FP8SPEC_KV_CALIB_PHASES: unknown phase(s) {sorted(bad)}")
    return phases


def quant_settings(active: set) -> dict:
    """scale format and backend for the weight-sync quantizer given the active patches."""
    fmt = "fp32"
    if "ue8m0_scales" in active:
        fmt = os.environ.get("FP8SPEC_UE8M0_RULE", "ue8m0")
        if fmt not in ("ue8m0", "ue8m0_fixed"):
            raise ValueError(f"FP8SPEC_UE8M0_RULE must be ue8m0 or ue8m0_fixed, got {fmt!r}")
    backend = "auto" if "fast_block_quant" in active else "reference"
    backend = os.environ.get("FP8SPEC_BLOCK_QUANT_BACKEND", backend)
    chunk_mb = int(os.environ.get("FP8SPEC_QUANT_CHUNK_MB", "2048"))
    return {"scale_fmt": fmt, "backend": backend, "chunk_bytes": chunk_mb << 20,
            **{key: _env_flag(env, default) for key, (env, default) in FLAT_KNOBS.items()}}


# The flat-bucket path's switches: settings key -> (environment variable, default). BENCHMARKS.md
# section 3 has what each one buys on an H200; fp8spec/runtime/README.md says what each one costs.
FLAT_KNOBS = {
    "flat_buckets": ("FP8SPEC_QUANT_FLAT_BUCKETS", True),  # one launch on the received flat buffer
    "reuse_outputs": ("FP8SPEC_QUANT_REUSE_OUTPUTS", True),  # output views made once per layout, reused
    # layout key hashed from the metadata message's length and ends (equality still compares every
    # byte), and the check that the selected tensors are the receiver's views made after the launch
    "lean_prelaunch": ("FP8SPEC_QUANT_LEAN_PRELAUNCH", True),
    # the compiled kernel's own launcher instead of kernel[grid](...) (self-tested, falls back)
    "fast_launch": ("FP8SPEC_QUANT_FAST_LAUNCH", True),
    # re-allocate the output memory when the receiver has mapped its buffer (before the first bucket)
    "prealloc_outputs": ("FP8SPEC_QUANT_PREALLOC_OUTPUTS", False),
    # keep the output memory between weight syncs (costs half a bucket of GPU memory all the time)
    "keep_outputs": ("FP8SPEC_QUANT_KEEP_OUTPUTS", False),
}


def _env_flag(name, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None or not v.strip():
        return default
    v = v.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 0 or 1, got {v!r}")


# ------------------------------------------------------------------------------- kv_scales trainer
def _wrap_armed(obj, method: str, cal: KVScaleCalibrator) -> None:
    orig = getattr(obj, method)

    @functools.wraps(orig)
    def armed(*args, **kwargs):
        with cal.calibrating():
            return orig(*args, **kwargs)

    setattr(obj, method, armed)


def attach_kv_calibration(worker) -> KVScaleCalibrator | None:
    """Attach a calibrator to ``worker.actor`` (an ActorRolloutRefWorker after init_model)."""
    actor = getattr(worker, "actor", None)
    if actor is None or getattr(worker, "_fp8spec_kv_calibrator", None) is not None:
        return None
    engine = actor.engine
    module = engine.module
    n_layers = num_layers_of(module)
    if n_layers is None:
        raise RuntimeError("fp8spec kv_scales: cannot find the number of decoder layers of the actor model")
    cal = KVScaleCalibrator(n_layers, divisors=kv_divisors_from_env())
    hooked = cal.attach(module)
    if hooked == 0:
        raise RuntimeError(
            "fp8spec kv_scales: found no attention module to calibrate in the actor "
            "(expected HF *Attention modules with layer_idx, or Megatron *.self_attention.core_attention)"
        )
    phases = kv_phases_from_env()
    if "compute_log_prob" in phases:
        _wrap_armed(actor, "infer_batch", cal)
    if "update_actor" in phases:
        _wrap_armed(actor, "train_mini_batch", cal)

    rollout_name = str(worker.config.rollout.get("name", "vllm"))
    if rollout_name == "sglang":
        rollout = getattr(worker, "rollout", None)
        if rollout is not None:
            _wrap_sglang_update(rollout, cal)
    else:
        _wrap_weight_stream(engine, cal)
    worker._fp8spec_kv_calibrator = cal
    logger.info("fp8spec kv_scales: calibrating %d attention layers (%s rollout)", hooked, rollout_name)
    return cal


def kv_recalibrate_from_env() -> str:
    v = os.environ.get(ENV_KV_RECALIBRATE, "per_step").strip() or "per_step"
    if v not in ("per_step", "once"):
        raise ValueError(f"FP8SPEC_KV_RECALIBRATE must be per_step or once, got {v!r}")
    return v


def _scales_for_sync(cal: KVScaleCalibrator):
    """The scales to push with this weight sync.

    ``once`` (FP8SPEC_KV_RECALIBRATE): the first scales computed from real rollout data are kept and pushed
    again at every later sync (vLLM's own calculate_kv_scales calibrates on the profiling dummy run instead,
    and its V1 runner resets the scales at every KV-cache wake-up; BENCHMARKS.md, real engine). Every rank
    freezes at the same sync: the decision follows the all-reduced amax, which all ranks share.
    """
    frozen = getattr(cal, "_fp8spec_frozen", None)
    if frozen is not None:
        return [(n, t.clone()) for n, t in frozen]
    dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    cal.reduce(device=dev)
    named = cal.named_scales(device=dev)
    cal.reset()
    if named and kv_recalibrate_from_env() == "once":
        cal._fp8spec_frozen = [(n, t.clone()) for n, t in named]
    return named


def _wrap_weight_stream(engine, cal: KVScaleCalibrator) -> None:
    orig = engine.get_per_tensor_param

    @functools.wraps(orig)
    def get_per_tensor_param(*args, **kwargs):
        gen, peft_config = orig(*args, **kwargs)
        if peft_config is not None:  # LoRA adapter sync: no base weights, no scales
            return gen, peft_config

        def with_scales():
            yield from gen
            yield from _scales_for_sync(cal)

        return with_scales(), peft_config

    engine.get_per_tensor_param = get_per_tensor_param


def _wrap_sglang_update(rollout, cal: KVScaleCalibrator) -> None:
    orig = rollout.update_weights

    @functools.wraps(orig)
    async def update_weights(weights, **kwargs):
        out = await orig(weights, **kwargs)
        if kwargs.get("peft_config") is None:
            named = _scales_for_sync(cal)
            if named:
                await send_sglang_kv_scales(rollout, named)
        return out

    rollout.update_weights = update_weights


async def send_sglang_kv_scales(rollout, named) -> None:
    """Post the scales to every TP worker of the replica through the fp8spec custom loader.

    Same transport as verl 0.9.1's ``ServerAdapter._update_weights_delta_flush``
    (``sglang_rollout.py`` lines 413-458): every rank serializes its GPU copy, TP rank 0 gathers and
    posts one ``update_weights_from_tensor`` with ``load_format`` = the loader's import path.
    """
    import torch.distributed as dist
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    from sglang.srt.utils import MultiprocessingSerializer

    try:
        from sglang.srt.model_executor.model_runner import LocalSerializedTensor
    except ImportError:  # moved in sglang 0.5.16
        from sglang.srt.model_executor.model_runner_components.weight_updater import LocalSerializedTensor
    try:
        from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions
    except ImportError:
        from sglang.srt.patch_torch import monkey_patch_torch_reductions

    monkey_patch_torch_reductions()
    mesh = rollout.device_mesh["infer_tp"]
    tp_size = mesh.mesh.size()[0]
    serialized = [(n, MultiprocessingSerializer.serialize(t.detach().reshape(()))) for n, t in named]
    gathered = [None for _ in range(tp_size)] if mesh.get_local_rank() == 0 else None
    dist.gather_object(obj=serialized, object_gather_list=gathered, dst=mesh.mesh.tolist()[0], group=mesh.get_group())
    if mesh.get_local_rank() != 0:
        return
    named_tensors = [
        (group[0][0], LocalSerializedTensor(values=[part[1] for part in group])) for group in zip(*gathered, strict=True)
    ]
    req = UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[MultiprocessingSerializer.serialize(named_tensors) for _ in range(tp_size)],
        load_format=SGLANG_KV_LOADER,
        flush_cache=False,
    )
    await rollout._engine.update_weights_from_tensor(req)


def patch_engine_workers(module) -> None:
    """kv_scales, trainer side: wrap ``ActorRolloutRefWorker.init_model`` (keeps verl's dispatch attrs)."""
    cls = module.ActorRolloutRefWorker
    if getattr(cls, "_fp8spec_kv_patched", False):
        return
    orig = cls.init_model

    @functools.wraps(orig)  # copies verl's @register attribute (MAGIC_ATTR) along with __dict__
    def init_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        attach_kv_calibration(self)
        return out

    cls.init_model = init_model
    cls._fp8spec_kv_patched = True


# ----------------------------------------------------------------- fast_block_quant / ue8m0_scales
def _quantize_many(tensors, block, settings):
    return quantize_bucket(tensors, block=block, scale_fmt=settings["scale_fmt"], backend=settings["backend"])


# How a bucket reaches ``quant_weights`` in the vLLM worker (verl 0.9.1, IPC path):
#   BucketedWeightSender.async_send_weights (bucketed_weight_transfer.py 102-164) copies each
#   (name, tensor) of the trainer's stream into ONE flat uint8 buffer at a byte offset aligned to the
#   tensor's element size (127-130, 155-158) and sends {"bucket_meta": {name: {name, shape, dtype,
#   offset, handle: None}}, "is_last"} with send_pyobj (133-135, 148-154, 163); a tensor larger than
#   the bucket goes alone with a CUDA IPC handle instead (140-146, 223-237).
#   BucketedWeightReceiver.receive_weights (269-309) maps the sender's buffer once (_init_buffer,
#   316-330), and per bucket recv_pyobj's the metadata (286) and builds each tensor as a view of that
#   buffer, ``self.buffer[offset : offset + size].view(dtype=dtype).view(shape)`` (288-298; with
#   use_shm the views are copied to the device one by one, 296-297), then calls
#   on_bucket_received(weights, is_last) (300) and synchronizes (301).
#   vLLMColocateWorkerExtension.update_weights_from_ipc's callback (utils.py 307-324) ->
#   _update_weights (367) -> split_buffer_updates (387; weight_update_utils.py 20-35, same tensor
#   objects) -> load_quanted_weights (393, and 396 for an MTP drafter; vllm_quant_utils.py 439) ->
#   list(weights) (452) -> quant_weights (453) -> model.load_weights (474).
# So the tensors quant_weights gets are views into one flat buffer whose layout the metadata
# describes. The receiver patch below records the metadata message and the buffer; quant_weights then
# quantizes the selected tensors with ONE launch on that buffer, through a BucketPlan cached by layout
# (the metadata repeats every step).


class ReceivedBucket:
    """One bucket as verl's receiver holds it: its flat uint8 ``buffer``, the ``bucket_meta`` dict (in
    the receiver's order), the raw pickled metadata message when known (the layout key), and the
    receiver's ``[(name, view), …]`` list."""

    __slots__ = ("buffer", "meta", "weights", "raw", "_key", "_lean_key", "_typed")

    def __init__(self, buffer, meta, weights, raw=None):
        self.buffer, self.meta, self.weights, self.raw = buffer, meta, weights, raw
        self._key = self._lean_key = None
        self._typed = {}

    def layout_key(self, lean: bool):
        """``key``, or with ``lean`` the same bytes behind a hash of their length and ends (see _RawKey)."""
        if not lean or self.raw is None:
            return self.key
        if self._lean_key is None:
            self._lean_key = _RawKey(self.raw)
        return self._lean_key

    @property
    def key(self):
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

    def typed(self, dtype):
        t = self._typed.get(dtype)
        if t is None:
            es = dtype.itemsize
            n = self.buffer.numel()
            t = self._typed[dtype] = self.buffer[: n - n % es].view(dtype)
        return t


class _RawKey:
    """A metadata message as a dict key that hashes only its length and its first and last bytes
    (the last entries' names and offsets differ from bucket to bucket) instead of all ~60 KB of it
    (Python hashes bytes with SipHash, ~15 us for a Qwen3-30B-A3B bucket on a 2-core box); equality
    still compares every byte (memcmp), so a key matches exactly the same message."""

    __slots__ = ("raw", "_h")

    def __init__(self, raw: bytes):
        self.raw = raw
        self._h = hash((len(raw), raw[:128], raw[-512:]))

    def __hash__(self):
        return self._h

    def __eq__(self, other):
        return type(other) is _RawKey and (self is other or (self._h == other._h and self.raw == other.raw))


_TLS = threading.local()


@contextlib.contextmanager
def received_bucket(buffer, meta, weights, raw=None):
    """Make ``quant_weights`` calls inside this block see the bucket (set by the receiver patch)."""
    prev = getattr(_TLS, "bucket", None)
    _TLS.bucket = ReceivedBucket(buffer, meta, weights, raw)
    try:
        yield _TLS.bucket
    finally:
        _TLS.bucket = prev


def _picker(idx):
    if len(idx) == 1:
        i = idx[0]
        return lambda seq: (seq[i],)
    return operator.itemgetter(*idx)


_SECOND = operator.itemgetter(1)
_FLAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_LAYOUTS: OrderedDict = OrderedDict()
_LAYOUTS_MAX = 4096
_ARENAS: dict = {}
FLAT_STATS = {"flat_launches": 0, "plan_builds": 0, "cache_hits": 0, "not_flat": 0, "list_path": 0,
              "spec_discarded": 0}
# what the receiver patch does with the output memory around a round (set from the settings by
# patch_vllm_quant; FP8SPEC_QUANT_KEEP_OUTPUTS / FP8SPEC_QUANT_PREALLOC_OUTPUTS)
OUTPUT_POLICY = {"keep_outputs": False, "prealloc_outputs": False}


def set_output_policy(settings: dict) -> None:
    for k in OUTPUT_POLICY:
        OUTPUT_POLICY[k] = bool(settings.get(k, False))


class _FlatLayout:
    __slots__ = ("sel", "plan", "mask", "pick_items", "pick_views", "outs", "launchers")

    def __init__(self, sel, plan, mask, pick_items, pick_views):
        self.sel, self.plan, self.mask, self.pick_items, self.pick_views = sel, plan, mask, pick_items, pick_views
        self.outs = None
        self.launchers = {}  # scale_fmt -> triton_blockquant.FlatLauncher into the reused output memory

    def fits(self, flat) -> bool:
        """O(1): the received buffer is long enough for the plan and on the plan's device."""
        return flat.numel() >= self.plan.x_extent and _tbq.same_device(flat.device, self.plan.device)

    def same_tensors(self, items, views) -> bool:
        """The selected items are (still) the receiver's views the plan was built from (C-level)."""
        return all(map(operator.is_, map(_SECOND, self.pick_items(items)), map(_SECOND, self.pick_views(views))))


class _OutputArena:
    """fp8 and float32 output storage of one device, shared by every cached layout.

    Each layout's per-tensor output views are made once (into this storage) and handed out again at
    every step, so the per-step cost does not grow with the number of tensors. Between weight-sync
    rounds the memory is given back with ``storage.resize_(0)`` and re-allocated with ``resize_(n)``
    at the next round's first bucket: the views keep pointing at the same storage object, as FSDP's
    flat-parameter views do. Contract (the same verl relies on for its BF16 path, where
    ``load_weights`` gets views of the receiver's buffer, bucketed_weight_transfer.py 295 and utils.py
    405, which the sender overwrites with the next bucket, line 155): ``load_weights`` copies what it
    is given and keeps no reference past the bucket (verl clones only for LoRA, which keeps tensors,
    utils.py 309-310, 374-376). ``FP8SPEC_QUANT_REUSE_OUTPUTS=0`` allocates fresh outputs per bucket.
    ``FP8SPEC_QUANT_KEEP_OUTPUTS=1`` keeps the memory between rounds (``release_outputs`` does nothing
    unless forced); ``FP8SPEC_QUANT_PREALLOC_OUTPUTS=1`` gets it back when the receiver has mapped the
    sender's buffer (``prepare_outputs``) instead of at the first bucket.
    """

    def __init__(self, device):
        self.y = torch.empty(0, dtype=blockquant.FP8_DTYPE, device=device)
        self.s = torch.empty(0, dtype=torch.float32, device=device)

    @staticmethod
    def _grow(t, n):
        st = t.untyped_storage()
        if st.nbytes() < n * t.element_size():
            st.resize_(n * t.element_size())
        if t.numel() < n:
            t = torch.empty(0, dtype=t.dtype, device=t.device).set_(st, 0, (n,), (1,))
        return t

    def reserve(self, ny, ns):
        self.y, self.s = self._grow(self.y, ny), self._grow(self.s, ns)

    def ensure(self):
        """Memory back after ``release`` (O(1))."""
        for t in (self.y, self.s):
            st = t.untyped_storage()
            need = t.numel() * t.element_size()
            if st.nbytes() < need:
                st.resize_(need)

    def release(self):
        for t in (self.y, self.s):
            t.untyped_storage().resize_(0)


def release_outputs(force: bool = False) -> None:
    """Give back the reused output memory (called when verl's receiver cleans up after a round);
    with ``FP8SPEC_QUANT_KEEP_OUTPUTS=1`` it stays allocated unless ``force``."""
    if OUTPUT_POLICY["keep_outputs"] and not force:
        return
    for dev, arena in _ARENAS.items():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        arena.release()


def prepare_outputs() -> None:
    """Re-allocate the reused output memory (its size from the last round) ahead of the first bucket;
    the receiver patch calls it once it has mapped the sender's buffer, with
    ``FP8SPEC_QUANT_PREALLOC_OUTPUTS=1``, so the allocation happens while the receiver waits for the
    sender to fill the first bucket instead of inside the first bucket's quantization."""
    for arena in _ARENAS.values():
        arena.ensure()


def clear_flat_cache() -> None:
    release_outputs(force=True)
    _LAYOUTS.clear()
    _ARENAS.clear()


def _build_layout(ctx, items, sel, dtype, block, settings):
    """The cached layout of ``items[sel]`` in the received bucket, or None when they are not views of
    the bucket's one flat buffer, all of the quantization dtype, at the offsets the metadata gives."""
    if dtype not in _FLAT_DTYPES:
        return None
    buf = ctx.buffer
    if not isinstance(buf, torch.Tensor) or buf.dtype != torch.uint8 or buf.dim() != 1 or not buf.is_contiguous():
        return None
    metas = list(ctx.meta.values())
    views = ctx.weights
    if len(metas) != len(views):
        return None
    pos = {id(t): j for j, (_, t) in enumerate(views)}
    es = dtype.itemsize
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
            or m["dtype"] != dtype  # mixed dtypes / needs a cast: the list path casts like verl
            or t.dtype != dtype
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
    plan = _tbq.make_flat_plan(shapes, offs, block, buf.device)
    mask = [False] * len(items)
    for i in sel:
        mask[i] = True
    lay = _FlatLayout(sel, plan, tuple(mask), _picker(sel), _picker(w_idx))
    if settings["reuse_outputs"]:
        arena = _ARENAS.get(buf.device)
        if arena is None:
            arena = _ARENAS[buf.device] = _OutputArena(buf.device)
        arena.reserve(plan.y_total, plan.s_total)
        arena.ensure()
        lay.outs = plan.outputs(arena.y[: plan.y_total], arena.s[: plan.s_total])
    return lay


def _bucket_for(settings):
    ctx = getattr(_TLS, "bucket", None)
    if ctx is None or settings["backend"] == "reference":
        return None
    if settings["backend"] == "triton" and _tbq._get_kernel() is None:
        return None  # the list path raises the usual error
    return ctx


def _launch_layout(ctx, lay, dtype, settings, flat=None):
    if flat is None:
        flat = ctx.typed(dtype)
    fmt = settings["scale_fmt"]
    FLAT_STATS["flat_launches"] += 1
    if lay.outs is None:
        return _tbq.quantize_flat(flat, lay.plan, scale_fmt=fmt)
    arena = _ARENAS[flat.device]
    arena.ensure()
    if settings.get("fast_launch", False):
        launcher = lay.launchers.get(fmt)
        if launcher is None:
            launcher = lay.launchers[fmt] = _tbq.FlatLauncher(lay.plan, (arena.y, arena.s), fmt, fast=True)
        launcher(flat)
    else:
        _tbq.quantize_flat(flat, lay.plan, scale_fmt=fmt, views=False, out=(arena.y, arena.s))
    return lay.outs


def _flat_speculate(items, dtype, block, settings):
    """Launch before verl's per-tensor selection runs, when this bucket's layout is cached: the GPU
    quantizes while the host classifies. ``_flat_bucket_quant`` then checks the selection is the
    cached one (else the launch is redone for the new selection; its outputs are overwritten).

    With ``lean_prelaunch`` the layout key is a ``_RawKey`` and the check that the selected tensors
    are the receiver's views (O(tensors)) runs after the launch, while the GPU works: if it fails the
    launch is discarded (it read the received buffer inside its bounds and wrote only the reused
    output memory, which nothing holds between buckets) and the bucket takes the list path."""
    ctx = _bucket_for(settings)
    if ctx is None:
        return None
    lean = settings.get("lean_prelaunch", False)
    lay = _LAYOUTS.get((ctx.layout_key(lean), len(items), dtype, block))
    if lay is None:
        return None
    if not lean:
        if not lay.same_tensors(items, ctx.weights):
            return None
        return lay, _launch_layout(ctx, lay, dtype, settings)
    flat = ctx.typed(dtype)
    if not lay.fits(flat):
        return None
    outs = _launch_layout(ctx, lay, dtype, settings, flat)
    if not lay.same_tensors(items, ctx.weights):
        FLAT_STATS["spec_discarded"] += 1
        return None
    return lay, outs


def _flat_bucket_quant(items, sel, dtype, block, settings, spec=None):
    """Quantize ``items[i]`` for i in ``sel`` with one launch on the received bucket's flat buffer.

    Returns ``(mask, [(q, scale_inv), …])`` or None (then the caller takes the list path). Per call,
    with the layout cached: one dict lookup keyed by the metadata bytes (hashed in C), a C-level
    identity check that the selected tensors are the receiver's views, one launch (already made by
    ``_flat_speculate``)."""
    if spec is not None and spec[0].sel == sel:
        FLAT_STATS["cache_hits"] += 1
        return spec[0].mask, spec[1]
    ctx = _bucket_for(settings)
    if ctx is None or not sel:
        return None
    key = (ctx.layout_key(settings.get("lean_prelaunch", False)), len(items), dtype, block)
    if spec is None and key in _LAYOUTS:
        FLAT_STATS["not_flat"] += 1  # same metadata, but not the receiver's tensors: do not trust it
        return None
    lay = _build_layout(ctx, items, sel, dtype, block, settings)  # new layout, or new selection
    if lay is None:
        FLAT_STATS["not_flat"] += 1
        return None
    FLAT_STATS["plan_builds"] += 1
    _LAYOUTS[key] = lay
    if len(_LAYOUTS) > _LAYOUTS_MAX:
        _LAYOUTS.popitem(last=False)
    return lay.mask, _launch_layout(ctx, lay, dtype, settings)


def _emit_flat(items, mask, outs):
    it = iter(outs)
    scale_name = blockquant.scale_name
    for (k, v), m in zip(items, mask):
        if m:
            q, s = next(it)
            yield (k, q)
            yield (scale_name(k), s)
        else:
            yield (k, v)


def make_vllm_quant_weights(module, settings: dict):
    """Replacement for ``vllm_quant_utils.quant_weights`` (same signature, same yield order)."""
    orig = module.quant_weights

    @functools.wraps(orig)
    def quant_weights(weights, model, quant_config, dtype=torch.bfloat16):
        if module.is_deepseek_v4_model(model) or module.is_vllm_ascend_mx_quant(quant_config):
            yield from orig(weights, model, quant_config, dtype=dtype)
            return
        module.fp8_state.seen_params.clear()
        module.fp8_state.fp8_param_names.clear()
        block = tuple(quant_config.weight_block_size)
        items = list(weights)
        flat_on = settings.get("flat_buckets", True)
        spec = _flat_speculate(items, dtype, block, settings) if flat_on else None
        classify = module._classify_quant_weight  # verl's own selection, as quant_weights line 370
        kinds = [classify(k, model, False) for k, _ in items]
        sel = tuple(compress(range(len(kinds)), map(operator.eq, kinds, repeat("fp8"))))
        if flat_on:
            flat = _flat_bucket_quant(items, sel, dtype, block, settings, spec)
            if flat is not None:
                yield from _emit_flat(items, *flat)
                return
        FLAT_STATS["list_path"] += 1
        results = {}
        chunk, chunk_bytes = [], 0
        for i in list(sel) + [None]:
            if i is not None:
                chunk.append(i)
                chunk_bytes += items[i][1].numel() * items[i][1].element_size()
            if chunk and (i is None or chunk_bytes >= settings["chunk_bytes"]):
                outs = _quantize_many([items[j][1].to(dtype) for j in chunk], block, settings)
                results.update(zip(chunk, outs))
                chunk, chunk_bytes = [], 0
        for i, (k, v) in enumerate(items):
            if i in results:
                q, s = results.pop(i)
                yield (k, q)
                yield (blockquant.scale_name(k), s)
            else:
                yield (k, v)

    quant_weights._fp8spec = settings
    return quant_weights


def patch_vllm_quant(module, settings: dict) -> None:
    if getattr(module.quant_weights, "_fp8spec", None) is not None:
        return
    module.quant_weights = make_vllm_quant_weights(module, settings)
    set_output_policy(settings)
    if settings.get("flat_buckets", True) and settings["backend"] != "reference":
        from . import _importhook

        _importhook.when_imported(MOD_BUCKET_TRANSFER, patch_bucket_receiver)


class _RecordingSocket:
    """Wraps the receiver's zmq socket; keeps the last bucket-metadata message (raw bytes + object).

    ``recv_pyobj`` is pyzmq's own definition (``recv`` then ``pickle.loads``)."""

    def __init__(self, sock):
        self._sock = sock
        self.last_raw = None
        self.last_meta = None

    def recv_pyobj(self, flags=0):
        raw = self._sock.recv(flags)
        obj = pickle.loads(raw)
        if isinstance(obj, dict) and "bucket_meta" in obj:
            self.last_raw = raw if isinstance(raw, bytes) else None
            self.last_meta = obj["bucket_meta"]
        return obj

    def __getattr__(self, name):
        return getattr(self._sock, name)


def patch_bucket_receiver(module) -> None:
    """fast_block_quant, vLLM worker: let quant_weights see each received bucket's flat buffer and
    metadata (``BucketedWeightReceiver``, bucketed_weight_transfer.py 240-355), and give the reused
    output memory back when the receiver cleans up after a round (its ``_cleanup``, 332-355, runs in a
    ``finally`` after the last bucket, line 309, and ends with ``empty_cache``, 345)."""
    cls = module.BucketedWeightReceiver
    if getattr(cls, "_fp8spec_flat_patched", False):
        return
    orig_init_socket, orig_receive, orig_cleanup = cls._init_socket, cls.receive_weights, cls._cleanup
    orig_init_buffer = cls._init_buffer

    @functools.wraps(orig_init_buffer)
    def _init_buffer(self):
        # verl 0.9.1 (lines 316-330): receives the buffer handle, maps it and acks; the sender then
        # fills the first bucket, which the receiver waits for (recv_pyobj, line 286)
        orig_init_buffer(self)
        if OUTPUT_POLICY["prealloc_outputs"] and not self.use_shm:
            prepare_outputs()

    @functools.wraps(orig_init_socket)
    def _init_socket(self):
        orig_init_socket(self)
        if not isinstance(self.socket, _RecordingSocket):
            self.socket = _RecordingSocket(self.socket)

    @functools.wraps(orig_receive)
    def receive_weights(self, on_bucket_received):
        def on_bucket(weights, is_last):
            sock = self.socket
            meta = getattr(sock, "last_meta", None) if isinstance(sock, _RecordingSocket) else None
            if meta is None or self.use_shm or not isinstance(self.buffer, torch.Tensor):
                return on_bucket_received(weights, is_last)  # shm: views were copied one by one (296-297)
            with received_bucket(self.buffer, meta, weights, raw=sock.last_raw):
                return on_bucket_received(weights, is_last)

        start, launches = time.perf_counter(), FLAT_STATS["flat_launches"]
        out = orig_receive(self, on_bucket)
        # one line per weight sync: which quantizer ran and how long the whole receive took
        logger.info("fp8spec fast_block_quant: weight sync received in %.3f s, %d flat-bucket launches, stats %s",
                    time.perf_counter() - start, FLAT_STATS["flat_launches"] - launches, dict(FLAT_STATS))
        return out

    @functools.wraps(orig_cleanup)
    def _cleanup(self):
        try:
            release_outputs()
        finally:
            orig_cleanup(self)

    cls._init_socket = _init_socket
    cls._init_buffer = _init_buffer
    cls.receive_weights = receive_weights
    cls._cleanup = _cleanup
    cls._fp8spec_flat_patched = True


def patch_fp8_utils(module, settings: dict) -> None:
    """Replace ``FP8QuantizerHelper.quant_weights_by_name`` (SGLang/TRT-LLM paths, trainer process)."""
    cls = module.FP8QuantizerHelper
    if getattr(cls.quant_weights_by_name, "_fp8spec", None) is not None:
        return
    orig = cls.quant_weights_by_name

    @functools.wraps(orig)
    async def quant_weights_by_name(self, weights, dtype=torch.bfloat16):
        if isinstance(self.quant_config, dict):
            block = self.quant_config.get("weight_block_size")
        else:
            block = getattr(self.quant_config, "weight_block_size", None)
        if block is None:
            raise ValueError("weight_block_size not found in quant_config")
        block = tuple(block)
        buf, nbytes = [], 0

        def flush():
            idx = [j for j, (k, _) in enumerate(buf) if self.should_quantize_param(k)]
            outs = _quantize_many([buf[j][1].to(dtype) for j in idx], block, settings) if idx else []
            res = dict(zip(idx, outs))
            out = []
            for j, (k, v) in enumerate(buf):
                if j in res:
                    out.append((k, res[j][0]))
                    out.append((blockquant.scale_name(k), res[j][1]))
                else:
                    out.append((k, v))
            return out

        async for k, v in module.ensure_async_iterator(weights):
            buf.append((k, v))
            nbytes += v.numel() * v.element_size()
            if nbytes >= settings["chunk_bytes"]:
                for item in flush():
                    yield item
                buf, nbytes = [], 0
        if buf:
            for item in flush():
                yield item

    quant_weights_by_name._fp8spec = settings
    cls.quant_weights_by_name = quant_weights_by_name
