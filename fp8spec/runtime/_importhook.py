"""Run a function right after a given module is imported (or now, if it already is).

The patches target modules of verl / engines that are imported late (e.g. verl's vLLM worker
extension is imported inside the vLLM worker process). ``fp8spec.runtime`` is itself imported from
``verl/__init__.py`` (``VERL_USE_EXTERNAL_MODULES``), before those modules exist, so it registers a
meta-path finder that wraps the target module's loader: after the module body has executed, the
registered callbacks run once with the module object.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable

_lock = threading.RLock()
_pending: dict[str, list[Callable]] = {}
_finder = None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec) if hasattr(self._inner, "create_module") else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        _fire(self._name, module)

    def __getattr__(self, item):  # get_code, get_source, is_package, ... of the real loader
        return getattr(self._inner, item)


class _Finder(importlib.abc.MetaPathFinder):
    _busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
            if spec is None:
                for f in sys.meta_path:
                    if f is self or not hasattr(f, "find_spec"):
                        continue
                    spec = f.find_spec(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec


def _fire(name, module):
    with _lock:
        callbacks = _pending.pop(name, [])
    for cb in callbacks:
        cb(module)


def when_imported(name: str, callback: Callable) -> None:
    """Call ``callback(module)`` once ``name`` is imported; immediately if it already is."""
    global _finder
    mod = sys.modules.get(name)
    if mod is not None:
        callback(mod)
        return
    with _lock:
        _pending.setdefault(name, []).append(callback)
        if _finder is None:
            _finder = _Finder()
            sys.meta_path.insert(0, _finder)


def pending() -> dict:
    with _lock:
        return {k: len(v) for k, v in _pending.items()}
