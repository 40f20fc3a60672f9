"""Per-stage breakdown of one weight sync: nested, CUDA-synchronised timers around the real
verl 0.9.1 / vLLM 0.24.0 functions, a JSON record and a table renderer.

    python -m benchmarks.engine.ws_breakdown FILE.json [FILE.json ...]   # render recorded breakdowns

``Timers.wrap(owner, attr, label)`` replaces ``owner.attr`` (a module function, a class method, an instance
attribute) by a timed wrapper; generator functions are timed per ``next()`` (verl's ``quant_weights`` is lazy: it
runs inside ``model.load_weights``). Each stage records calls, inclusive time and self time (inclusive minus the
stages nested in it), so the table adds up. With ``sync`` set (``torch.cuda.synchronize`` on the GPU) each entry
and exit waits for the device, so the time lands on the stage that launched the work; this costs time, so the
probe reports the instrumented sync next to uninstrumented ones.

Hook points (read statically from the released wheels; line numbers of verl 0.9.1 / vLLM 0.24.0):

* engine process, ``install_worker(timers, model)``:
  - ``BucketedWeightReceiver.receive_weights`` (verl ``workers/rollout/vllm_rollout/bucketed_weight_transfer.py``
    269-309) and its socket's ``recv_pyobj`` (line 286: waiting for the sender to fill and hand over a bucket);
    ``_init_buffer`` (316-330: the IPC buffer handle mapped once per sync);
  - ``split_buffer_updates`` (``vllm_rollout/weight_update_utils.py`` 20, imported by name into
    ``vllm_rollout/utils.py`` line 34 and called from ``_update_weights`` 367-414: verl's name selection);
  - ``load_quanted_weights`` (``utils/vllm/vllm_quant_utils.py`` 439-482, imported into ``utils.py`` line 33);
    ``quant_weights`` (346-407, a generator consumed by ``model.load_weights``, line 474);
    ``prepare_quanted_weights_for_loading`` (410-425) and ``process_quanted_weights_after_loading`` (428-436),
    imported inside ``update_weights_from_ipc`` (lines 286, 336) so wrapped on their module;
  - ``model.load_weights`` (vLLM ``models/qwen3.py`` 341 / ``qwen3_moe.py`` 770, into ``Qwen2Model.load_weights``
    ``qwen2.py`` 428-479 / ``Qwen3MoeModel.load_weights`` ``qwen3_moe.py`` 531-659);
  - each parameter's ``weight_loader`` (bound when the layer is built, so wrapped on the parameter, by the owning
    class: ``QKVParallelLinear.weight_loader_v2`` ``layers/linear.py`` 1078 (qkv fusion),
    ``MergedColumnParallelLinear.weight_loader_v2`` 847 (gate_up fusion), ``RowParallelLinear.weight_loader_v2``
    1619, ``RoutedExperts.weight_loader`` ``layers/fused_moe/routed_experts.py`` 579 (expert stacking,
    ``_load_w13`` 442 / ``_load_w2`` 493)) and ``default_weight_loader`` (``model_loader/weight_utils.py`` 1198,
    looked up by name in ``qwen2.py`` / ``qwen3_moe.py``);
  - fp8spec's ``DirectSync.apply`` when the ``direct_sync`` patch is active.
* driver process, ``install_sender(timers)``: ``BucketedWeightSender._init_buffer`` (179-199) and the socket's
  ``recv`` (lines 136 and 162: waiting for the receiver's ack); the sender's bucket fill is the rest of
  ``async_send_weights`` (102-166).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGE_ORDER = (
    "sender.init_buffer", "sender.wait_ack", "receive_weights", "receiver.init_buffer", "receiver.wait_bucket",
    "prepare_quanted_weights_for_loading", "split_buffer_updates", "direct_sync.apply", "load_quanted_weights",
    "model.load_weights", "quant_weights", "loader.QKVParallelLinear", "loader.MergedColumnParallelLinear",
    "loader.RowParallelLinear", "loader.RoutedExperts", "loader.default_weight_loader",
    "process_quanted_weights_after_loading",
)


class Timers:
    """Nested stage timers: per label, calls, inclusive seconds and self seconds (nested stages excluded)."""

    def __init__(self, sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter):
        self.sync, self.clock = sync, clock
        self.stats: dict[str, dict[str, float]] = {}
        self._stack: list[list[float]] = []  # [start, nested seconds] per open stage

    def _enter(self) -> None:
        if self.sync:
            self.sync()
        self._stack.append([self.clock(), 0.0])

    def _exit(self, label: str) -> None:
        if self.sync:
            self.sync()
        start, nested = self._stack.pop()
        dt = self.clock() - start
        s = self.stats.setdefault(label, {"calls": 0, "total_s": 0.0, "self_s": 0.0})
        s["calls"] += 1
        s["total_s"] += dt
        s["self_s"] += dt - nested
        if self._stack:
            self._stack[-1][1] += dt

    def timed(self, fn: Callable, label: str) -> Callable:
        if getattr(fn, "_ws_timed", None) is self:
            return fn
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                it = fn(*args, **kwargs)
                while True:
                    self._enter()
                    try:
                        item = next(it)
                    except StopIteration:
                        return
                    finally:
                        self._exit(label)
                    yield item

            wrapper: Any = gen_wrapper
        else:

            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                self._enter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._exit(label)

        wrapper._ws_timed = self
        return wrapper

    def wrap(self, owner: Any, attr: str, label: str) -> bool:
        """Replace ``owner.attr`` by its timed version; False when there is no such callable."""
        fn = getattr(owner, attr, None)
        if not callable(fn):
            return False
        if inspect.isclass(owner) and isinstance(inspect.getattr_static(owner, attr), staticmethod):
            setattr(owner, attr, staticmethod(self.timed(fn, label)))
        else:
            setattr(owner, attr, self.timed(fn, label))
        return True

    def reset(self) -> None:
        self.stats.clear()

    def record(self, **extra: Any) -> dict:
        return {"stages": {k: dict(v) for k, v in self.stats.items()}, **extra}


class TimedProxy:
    """Attribute proxy timing some methods of an object whose attributes cannot be set (a zmq socket)."""

    def __init__(self, obj: Any, timers: Timers, methods: dict[str, str]):
        self._obj, self._timed = obj, {m: timers.timed(getattr(obj, m), lbl) for m, lbl in methods.items()}

    def __getattr__(self, name: str) -> Any:
        return self._timed.get(name) or getattr(self._obj, name)


def _socket_hook(timers: Timers, cls: Any, methods: dict[str, str]) -> None:
    """After ``cls._init_socket`` puts a zmq socket on ``self.socket``, time the named socket methods."""
    orig = cls._init_socket
    if getattr(orig, "_ws_socket", False):
        return

    @functools.wraps(orig)
    def _init_socket(self):
        orig(self)
        self.socket = TimedProxy(self.socket, timers, methods)

    _init_socket._ws_socket = True  # type: ignore[attr-defined]
    cls._init_socket = _init_socket


def install_sender(timers: Timers) -> None:
    from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as b

    timers.wrap(b.BucketedWeightSender, "_init_buffer", "sender.init_buffer")
    timers.wrap(b.BucketedWeightSender, "async_send_weights", "sender.async_send_weights")
    _socket_hook(timers, b.BucketedWeightSender, {"recv": "sender.wait_ack"})


def _loader_label(loader: Any) -> str:
    owner = getattr(loader, "__self__", None)
    if owner is not None:
        for cls in type(owner).__mro__:
            if cls.__name__ in ("QKVParallelLinear", "MergedColumnParallelLinear", "RowParallelLinear",
                                "RoutedExperts", "ColumnParallelLinear"):
                return "loader." + cls.__name__
        return "loader." + type(owner).__name__
    return "loader." + getattr(loader, "__name__", "other")


def wrap_param_loaders(timers: Timers, model: Any) -> int:
    """Time each parameter's own ``weight_loader`` (bound at layer build time), labelled by the owning class."""
    n = 0
    for _, p in model.named_parameters():
        loader = getattr(p, "weight_loader", None)
        if callable(loader) and getattr(loader, "_ws_timed", None) is not timers:
            p.weight_loader = timers.timed(loader, _loader_label(loader))
            n += 1
    return n


def install_worker(timers: Timers, model: Any) -> dict:
    """Wrap verl's receiver and vLLM's loading path in an engine process; returns what was wrapped."""
    import verl.utils.vllm.vllm_quant_utils as q
    import verl.workers.rollout.vllm_rollout.utils as u
    from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as b

    done = {
        "receive_weights": timers.wrap(b.BucketedWeightReceiver, "receive_weights", "receive_weights"),
        "receiver.init_buffer": timers.wrap(b.BucketedWeightReceiver, "_init_buffer", "receiver.init_buffer"),
        "split_buffer_updates": timers.wrap(u, "split_buffer_updates", "split_buffer_updates"),
        "load_quanted_weights": timers.wrap(u, "load_quanted_weights", "load_quanted_weights"),
        "quant_weights": timers.wrap(q, "quant_weights", "quant_weights"),
        "prepare": timers.wrap(q, "prepare_quanted_weights_for_loading", "prepare_quanted_weights_for_loading"),
        "process": timers.wrap(q, "process_quanted_weights_after_loading", "process_quanted_weights_after_loading"),
        "model.load_weights": timers.wrap(model, "load_weights", "model.load_weights"),
    }
    _socket_hook(timers, b.BucketedWeightReceiver, {"recv_pyobj": "receiver.wait_bucket"})
    for modname in ("vllm.model_executor.models.qwen2", "vllm.model_executor.models.qwen3_moe"):
        mod = sys.modules.get(modname)
        if mod is not None:
            done["default_weight_loader:" + modname] = timers.wrap(
                mod, "default_weight_loader", "loader.default_weight_loader"
            )
    try:
        from fp8spec.runtime.weight_sync.receiver.direct_sync import DirectSync

        done["direct_sync.apply"] = timers.wrap(DirectSync, "apply", "direct_sync.apply")
    except ImportError:
        pass
    done["param_loaders"] = wrap_param_loaders(timers, model)  # type: ignore[assignment]
    return done


def _order(label: str) -> tuple[int, str]:
    return (STAGE_ORDER.index(label) if label in STAGE_ORDER else len(STAGE_ORDER), label)


def render(record: dict, title: str = "") -> str:
    """A Markdown table of one recorded breakdown: stage, calls, inclusive ms, self ms, share of the sync."""
    stages = record.get("stages", {})
    total = record.get("sync_s") or max((s["total_s"] for s in stages.values()), default=0.0)
    lines = [f"### {title}" if title else "", "| stage | calls | inclusive ms | self ms | self % of sync |",
             "|---|---:|---:|---:|---:|"]
    for label in sorted(stages, key=_order):
        s = stages[label]
        share = 100.0 * s["self_s"] / total if total else 0.0
        lines.append(f"| {label} | {int(s['calls'])} | {1e3 * s['total_s']:.1f} | {1e3 * s['self_s']:.1f} "
                     f"| {share:.1f} |")
    # sender.* stages run in the driver process, concurrently with the engine's: not part of the engine's sum
    accounted = sum(s["self_s"] for k, s in stages.items() if not k.startswith("sender."))
    if record.get("sync_s"):
        lines.append(f"| (rest: engine time in no stage) |  |  | {1e3 * (total - accounted):.1f} "
                     f"| {100.0 * (total - accounted) / total:.1f} |")
        lines.append(f"| **sync (instrumented)** |  | {1e3 * total:.1f} |  | 100.0 |")
    if record.get("plain_sync_s"):
        lines.append(f"| sync without timers (median) |  | {1e3 * record['plain_sync_s']:.1f} |  |  |")
    return "\n".join(x for x in lines if x) + "\n"


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Render recorded weight-sync breakdowns as tables.")
    ap.add_argument("files", nargs="+", metavar="FILE.json", help="records the weight-sync probe wrote")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:  # argparse's usage error (2), or --help (0)
        return int(exc.code or 0)
    for f in args.files:
        rec = json.loads(Path(f).read_text(encoding="utf-8"))
        sys.stdout.write(render(rec, rec.get("title", Path(f).stem)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
