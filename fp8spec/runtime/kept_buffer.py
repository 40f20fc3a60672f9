"""verl's weight-sync bucket buffer and its CUDA IPC mapping, kept between syncs (issue 23: the per-sync set-up).

verl 0.9.1 sets the buffer up afresh at every sync (``verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py``):
the sender allocates it and makes its CUDA IPC handle (``_init_buffer``, 179-199: ``torch.empty`` +
``reduce_tensor``, sent over zmq), the receiver opens the handle (``rebuild_ipc`` in its ``_init_buffer``, 322-336)
and both give the memory back at the end (``_cleanup``: ``del``, ``ipc_collect``, ``empty_cache``). On Qwen3-8B that
set-up is 5.0 ms of the trainer's side and 0.7 ms of the engine's per sync (BENCHMARKS.md 8.7), a tenth of a sync.

With ``FP8SPEC_SEND_KEEP_BUFFER=1`` (direct_sync):

* sender: one buffer per process (per device and bucket size) is allocated and its handle made once; every sync
  sends that same handle, marked as kept (``KeptHandle``: a tuple, so verl's own receiver unpacks it as always and
  maps it afresh each sync). A second sender running while the kept buffer is in use gets verl's own per-sync
  buffer. Shared-memory mode (``use_shm``) is verl's, unchanged.
* receiver: ``rebuild_ipc`` opens a kept handle once per process and returns the same tensor at every later sync
  (a new kept handle replaces the old mapping); any other handle (verl's per-sync buffers, a tensor larger than a
  bucket sent alone) is opened as verl opens it.

The cost is memory: one bucket (``rollout.checkpoint_engine.update_weights_bucket_megabytes``, 2048 MiB by
default) held on each trainer GPU while it trains, which is why it is a switch, off by default.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from types import ModuleType
from typing import Any

import torch

log = logging.getLogger("fp8spec.runtime.kept_buffer")
FLAG = "_fp8spec_kept_buffer"
# this process's kept-buffer events (the sync lines and the tests read them)
STATS = {"allocated": 0, "reused": 0, "fresh": 0, "mapped": 0, "map_reused": 0}
_SENDER: dict[str, Any] = {"key": None, "buffer": None, "handle": None, "busy": False}
_RECEIVER: dict[Any, torch.Tensor] = {}


class KeptHandle(tuple):
    """verl's ``(rebuild function, arguments)`` handle of a buffer the sender keeps, with ``token``, unique to
    that buffer: the receiver keeps its mapping by it. Pickles as this class with its token (fp8spec's runtime
    is importable wherever verl's receiver runs with it)."""

    token: str

    def __new__(cls, handle: Any, token: str) -> KeptHandle:
        self = super().__new__(cls, handle)
        self.token = token
        return self

    def __reduce__(self) -> tuple:
        return (KeptHandle, (tuple(self), self.token))


def sender_buffer(module: ModuleType, bucket_size: int) -> tuple[torch.Tensor, KeptHandle] | None:
    """This process's kept buffer of ``bucket_size`` bytes and its handle, made once; None while it is in use
    (the caller then sets up verl's own)."""
    if _SENDER["busy"]:
        STATS["fresh"] += 1
        return None
    device = f"{module.get_device_name()}:{module.get_device_id()}"
    key = (device, bucket_size)
    if _SENDER["key"] != key:
        _SENDER.update(key=None, buffer=None, handle=None)  # a new size: the old buffer goes first
        buffer = torch.empty(bucket_size, dtype=torch.uint8, device=device)
        handle = KeptHandle(module.reduce_tensor(buffer), f"{os.getpid()}-{uuid.uuid4().hex}")
        _SENDER.update(key=key, buffer=buffer, handle=handle)
        STATS["allocated"] += 1
        log.info(
            "fp8spec kept_buffer: the weight-sync buffer (%d MiB on %s) is kept between syncs",
            bucket_size >> 20,
            device,
        )
    else:
        STATS["reused"] += 1
    _SENDER["busy"] = True
    return _SENDER["buffer"], _SENDER["handle"]


def release_sender() -> None:
    _SENDER["busy"] = False


def patch_bucket_transfer(module: ModuleType) -> None:
    """Keep the sender's buffer and the receiver's mapping in ``module`` (verl's bucketed_weight_transfer.py);
    idempotent. Installed before the other patches of that module, which wrap the methods they find."""
    sender_cls = module.BucketedWeightSender
    if getattr(sender_cls, FLAG, False):
        return
    orig_init, orig_cleanup, orig_rebuild = sender_cls._init_buffer, sender_cls._cleanup, module.rebuild_ipc

    @functools.wraps(orig_init)
    def _init_buffer(self: Any) -> None:
        kept = None if self.use_shm else sender_buffer(module, self.bucket_size)
        if kept is None:
            return orig_init(self)
        buffer, handle = kept
        self._fp8spec_kept = True
        # verl's exchange (bucketed_weight_transfer.py 183-197): the handle, then the receiver's ack
        self.socket.send_pyobj(handle)
        self.socket.recv()
        self.buffer, self.shm = buffer, None

    @functools.wraps(orig_cleanup)
    def _cleanup(self: Any) -> None:
        try:
            orig_cleanup(self)  # drops this sender's reference only: the module keeps the buffer
        finally:
            if getattr(self, "_fp8spec_kept", False):
                self._fp8spec_kept = False
                release_sender()

    @functools.wraps(orig_rebuild)
    def rebuild_ipc(handle: Any, device_id: int | None = None) -> torch.Tensor:
        if not isinstance(handle, KeptHandle):
            return orig_rebuild(handle, device_id)
        key = (handle.token, device_id)
        got = _RECEIVER.get(key)
        if got is None:
            _RECEIVER.clear()  # a new kept buffer: the old mapping is closed once its last view goes
            got = _RECEIVER[key] = orig_rebuild(handle, device_id)
            STATS["mapped"] += 1
        else:
            STATS["map_reused"] += 1
        return got

    sender_cls._init_buffer = _init_buffer
    sender_cls._cleanup = _cleanup
    module.rebuild_ipc = rebuild_ipc  # type: ignore[attr-defined]  # verl's receiver looks it up per call
    setattr(sender_cls, FLAG, True)
