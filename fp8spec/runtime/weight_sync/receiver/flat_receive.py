"""verl's bucket receiver showing each received bucket's flat buffer and metadata to the flat-bucket engine.

Shared by ``fast_block_quant`` (verl's ``quant_weights`` quantizes the bucket in place, ``quantization/
verl_quant.py``) and ``direct_sync`` (the plan reads covered tensors where they lie, ``direct_sync_hook``): both
read the bucket being received through ``FlatBucketEngine.bucket``, which this wrapper sets around verl's
callback, and both give the reused output memory back when the receiver cleans up.
"""

from __future__ import annotations

import functools
import logging
import pickle
import time
from types import ModuleType

import torch

from fp8spec.runtime.quantization.flat_bucket import ENGINE, FlatBucketEngine

logger = logging.getLogger(__name__)


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


def patch_bucket_receiver(module: ModuleType, engine: FlatBucketEngine = ENGINE, report: bool = True) -> None:
    """vLLM worker: let quant_weights and direct_sync see each received bucket's flat buffer and
    metadata (``BucketedWeightReceiver``, bucketed_weight_transfer.py 240-355), and give the reused
    output memory back when the receiver cleans up after a round (its ``_cleanup``, 332-355, runs in a
    ``finally`` after the last bucket, line 309, and ends with ``empty_cache``, 345)."""
    cls = module.BucketedWeightReceiver
    if getattr(cls, "_fp8spec_flat_patched", False):
        return
    orig_init_socket, orig_receive, orig_cleanup = cls._init_socket, cls.receive_weights, cls._cleanup

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
            with engine.received_bucket(self.buffer, meta, weights, raw=sock.last_raw):
                return on_bucket_received(weights, is_last)

        start, launches = time.perf_counter(), engine.stats["flat_launches"]
        out = orig_receive(self, on_bucket)
        # one line per weight sync: which quantizer ran and how long the whole receive took
        if not report:  # direct_sync: its own line per sync (direct_sync_hook) says what ran
            return out
        logger.info(
            "fp8spec fast_block_quant: weight sync received in %.3f s, %d flat-bucket launches, stats %s",
            time.perf_counter() - start,
            engine.stats["flat_launches"] - launches,
            dict(engine.stats),
        )
        return out

    @functools.wraps(orig_cleanup)
    def _cleanup(self):
        try:
            engine.release_outputs()
        finally:
            orig_cleanup(self)

    cls._init_socket = _init_socket
    cls.receive_weights = receive_weights
    cls._cleanup = _cleanup
    cls._fp8spec_flat_patched = True


def patch_bucket_receiver_quiet(module: ModuleType) -> None:
    """``patch_bucket_receiver`` without its per-sync line: with direct_sync, whose own line per sync
    (``direct_sync_hook``) says what ran."""
    patch_bucket_receiver(module, report=False)
