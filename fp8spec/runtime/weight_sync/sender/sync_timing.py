"""The trainer's side of a weight sync, in one log line per sync: where the time went before the engine has it.

verl 0.9.1's ``BucketedWeightSender.async_send_weights`` (``verl/workers/rollout/vllm_rollout/
bucketed_weight_transfer.py`` 102-166) runs in the trainer process: it pulls each (name, tensor) from the
trainer's generator (FSDP: ``param.to(device).full_tensor()`` per parameter, ``workers/engine/fsdp/
transformer_impl.py`` 1032), copies it into a bucket, and per full bucket synchronizes the device (134, 162),
sends the bucket's metadata (135, 163; 234 for a tensor larger than a bucket) and waits for the receiver's reply
(136, 164, 235), which comes once the engine has quantized and loaded the bucket. The wrapper times the waits at
those three points, per bucket, with no per-tensor work:

* ``GPU wait``: the device synchronizations: the trainer's queued copies (host-to-device of offloaded shards,
  gathers, the bucket fill) finishing;
* ``engine``: the replies: the engine's receive, quantization and load of each bucket (with ``fused_send``'s
  two-half pipeline, fp8spec's receiver replies on receipt, so this is the engine's work the trainer's fill of the
  next bucket did not hide);
* ``trainer stream + fill``: the rest: the host side of the trainer's generator and of the fill loop, split
  further (on Qwen3-30B-A3B it is 0.09-0.13 s of a 0.12-0.16 s sync, 5-7 us per tensor on the H200's
  host where the fill's loop alone costs 2-3 us on the CPU machine) into what it holds per sync or per bucket:
  ``set-up`` (verl's ``_init_socket`` and ``_init_buffer``: the bucket's allocation and CUDA IPC handle, the
  receiver's reply), ``launches`` (the host side of the table fill's copy launches, ``gather_copy.launch``),
  ``sends`` (each bucket's metadata pickled and sent) and ``gc`` (Python's collections while the sync runs in this
  thread); what is left is the per-tensor loop.

docs/results.md#real-size-rl-step is why: in the real 4B loop the engine received a sync in 0.50 s of 1.40 s.

Measurement only: installed where ``sync_timing`` is named in ``FP8SPEC_RUNTIME_PATCHES`` (a compiled bundle never
names it), since it replaces the ``get_torch_device`` of verl's transfer module and adds a gc callback to the
process. ``direct_sync``'s own line per sync (engine side) is there either way.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import logging
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

log = logging.getLogger("fp8spec.runtime.weight_sync.sender.sync_timing")

FLAG = "_fp8spec_sync_timing"
GIB = float(1 << 30)


def _table_tensors() -> int:
    """The tensors the table fill copied in this process so far (gather_copy.STATS; imported here, at call time:
    verl's sender, the only caller, runs where torch is)."""
    from fp8spec.runtime.weight_sync.sender import gather_copy

    return gather_copy.STATS["tensors"]


class SendTimes:
    """One sync's counts and waits (seconds)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.table_at = _table_tensors()
        self.tensors = self.buckets = self.bytes = 0
        self.gpu_wait = self.engine = 0.0
        # parts of the host time (the waits above excluded): see the module's docstring
        self.setup = self.launches = self.sends = self.gc = 0.0
        self._gc_at = 0.0

    def count(self, bucket_meta: Mapping) -> None:
        self.buckets += 1
        self.tensors += len(bucket_meta)
        nbytes = getattr(bucket_meta, "nbytes", None)  # a PackedMeta: from its lists, no dict per tensor
        if callable(nbytes):
            self.bytes += nbytes()
            return
        for m in bucket_meta.values():
            self.bytes += m["dtype"].itemsize * m["shape"].numel()

    def loop(self, host: float) -> float:
        """What the per-tensor loop leaves of ``host``, the other parts taken out."""
        return max(host - self.setup - self.launches - self.sends - self.gc, 0.0)

    def line(self) -> str:
        total = time.perf_counter() - self.start
        host = max(total - self.gpu_wait - self.engine, 0.0)
        table = _table_tensors() - self.table_at
        return (
            f"fp8spec weight sync sent: {self.tensors} tensors, {self.buckets} buckets, "
            f"{self.bytes / GIB:.2f} GiB in {total:.3f} s: trainer stream + fill {host:.3f} s "
            f"(loop {self.loop(host):.3f}, set-up {self.setup:.3f}, launches {self.launches:.3f}, "
            f"sends {self.sends:.3f}, gc {self.gc:.3f}), "
            f"GPU wait {self.gpu_wait:.3f} s, engine {self.engine:.3f} s"
            + (f" ({table} tensors copied through the table)" if table else "")
        )


# the sync being sent by this task (asyncio keeps a context per task; the receiver's thread has none)
_CURRENT: contextvars.ContextVar[SendTimes | None] = contextvars.ContextVar("fp8spec_send", default=None)


def _timed(wait: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, its duration added to the current sync's ``wait`` (none in flight: just the call)."""
    st = _CURRENT.get()
    if st is None:
        return fn(*args, **kwargs)
    t0 = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        setattr(st, wait, getattr(st, wait) + time.perf_counter() - t0)


def _gc_timer(phase: str, info: dict) -> None:
    """``gc.callbacks`` entry: a collection's time, added to the sync in flight in the collecting thread."""
    st = _CURRENT.get()
    if st is None:
        return
    if phase == "start":
        st._gc_at = time.perf_counter()
    elif st._gc_at:
        st.gc += time.perf_counter() - st._gc_at
        st._gc_at = 0.0


class _TimedDevice:
    """The device module verl's module calls ``synchronize`` on; other attributes pass through."""

    def __init__(self, dev: Any):
        self._dev = dev

    def synchronize(self, *args: Any, **kwargs: Any) -> Any:
        return _timed("gpu_wait", self._dev.synchronize, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dev, name)


class _TimedSocket:
    """The sender's zmq socket: counts each bucket's metadata message and times the receiver's replies."""

    def __init__(self, sock: Any):
        self._sock = sock

    def send_pyobj(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        st = _CURRENT.get()
        if st is not None and isinstance(obj, dict) and isinstance(obj.get("bucket_meta"), Mapping):
            st.count(obj["bucket_meta"])
            return _timed("sends", self._sock.send_pyobj, obj, *args, **kwargs)
        return self._sock.send_pyobj(obj, *args, **kwargs)

    def recv(self, *args: Any, **kwargs: Any) -> Any:
        return _timed("engine", self._sock.recv, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _add(part: str, seconds: float) -> None:
    st = _CURRENT.get()
    if st is not None:
        setattr(st, part, getattr(st, part) + seconds)


def _time_table_launches() -> None:
    """Wrap ``gather_copy.launch`` (looked up by the fill at each call) to time its host side; once per process."""
    from fp8spec.runtime.weight_sync.sender import gather_copy

    if getattr(gather_copy.launch, FLAG, False):
        return
    orig = gather_copy.launch

    @functools.wraps(orig)
    def launch(*args: Any, **kwargs: Any) -> Any:
        return _timed("launches", orig, *args, **kwargs)

    setattr(launch, FLAG, True)
    gather_copy.launch = launch


def patch_bucket_sender(module: ModuleType) -> None:
    """Wrap ``BucketedWeightSender`` in ``module`` (verl's bucketed_weight_transfer.py); idempotent."""
    cls = module.BucketedWeightSender
    if getattr(cls, FLAG, False):
        return
    orig_send, orig_init_socket, orig_init_buffer = cls.async_send_weights, cls._init_socket, cls._init_buffer
    orig_device = module.get_torch_device
    _time_table_launches()
    if _gc_timer not in gc.callbacks:
        gc.callbacks.append(_gc_timer)

    @functools.wraps(orig_device)
    def get_torch_device() -> Any:
        return _TimedDevice(orig_device())

    @functools.wraps(orig_init_socket)
    def _init_socket(self) -> None:
        _timed("setup", orig_init_socket, self)
        if not isinstance(self.socket, _TimedSocket):
            self.socket = _TimedSocket(self.socket)

    @functools.wraps(orig_init_buffer)
    def _init_buffer(self) -> None:
        t0 = time.perf_counter()
        engine_at = st.engine if (st := _CURRENT.get()) is not None else 0.0
        try:
            orig_init_buffer(self)
        finally:
            # the receiver's reply to the handle is the engine's time, already counted there
            _add("setup", time.perf_counter() - t0 - ((st.engine - engine_at) if st is not None else 0.0))

    @functools.wraps(orig_send)
    async def async_send_weights(self, weights: Any) -> Any:
        st = SendTimes()
        token = _CURRENT.set(st)
        try:
            return await orig_send(self, weights)
        finally:
            _CURRENT.reset(token)
            log.info(st.line())
            self._fp8spec_send_times = st

    module.get_torch_device = get_torch_device  # type: ignore[attr-defined]  # verl's name the sender calls
    cls._init_socket = _init_socket
    cls._init_buffer = _init_buffer
    cls.async_send_weights = async_send_weights
    setattr(cls, FLAG, True)
