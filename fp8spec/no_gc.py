"""Pause Python's cyclic garbage collector while building many small acyclic objects.

Building tens of thousands of tuples (module listings, name indexes, module classes) lets the collector
rescan every live object of the process several times over; nothing built this way forms a cycle, so the
pause only removes that rescanning and keeps the cost linear.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
