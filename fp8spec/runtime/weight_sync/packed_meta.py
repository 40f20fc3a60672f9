"""A bucket's metadata as four lists instead of one dict per tensor.

verl 0.9.1's sender sends each bucket's layout as ``{"bucket_meta": {name: {"name", "shape": torch.Size,
"dtype", "offset", "handle"}}}`` with ``send_pyobj`` and the receiver ``pickle.loads`` it
(``bucketed_weight_transfer.py`` 155-163, 286). For Qwen3-30B-A3B's 18,867 tensors that is a pickle per
sync (1.7 MB) whose loading rebuilds a ``torch.Size`` per tensor: 17 ms to pickle and 11 ms to unpickle on the
CPU machine (docs/results.md#weight-sync), on the trainer's and the engine's critical paths. ``PackedMeta`` holds the same
facts as four lists (names, shapes as int tuples, dtypes, offsets) and pickles as them (1.3 MB, 2.7 + 2.9 ms).

It is a read-only ``Mapping`` of verl's shape: ``meta[name]`` is the dict verl's receiver reads (``torch.Size``,
``handle`` None), built on first access and kept, so verl's own receiver, and anything else that iterates, gets
what it always got. fp8spec's receiver (``lazy_receive``) and the sender's timing line read the lists directly.
It never carries a CUDA IPC handle: verl's large-weight path sends its own dict. Unpickling it imports this
module, so both ends must have fp8spec's runtime importable (a bundle's workers do); the sender uses it only
within the ``direct_sync`` patch, which installs fp8spec's receiver.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch


class PackedMeta(Mapping):
    """verl's ``bucket_meta`` as lists: ``names[i]`` has shape ``shapes[i]``, ``dtypes[i]``, ``offsets[i]``."""

    __slots__ = ("_entries", "_index", "dtypes", "names", "offsets", "shapes")

    def __init__(
        self,
        names: list[str] | None = None,
        shapes: list[tuple[int, ...]] | None = None,
        dtypes: list[torch.dtype] | None = None,
        offsets: list[int] | None = None,
    ):
        self.names = [] if names is None else names
        self.shapes = [] if shapes is None else shapes
        self.dtypes = [] if dtypes is None else dtypes
        self.offsets = [] if offsets is None else offsets
        self._index: dict[str, int] | None = None
        self._entries: dict[int, dict[str, Any]] = {}

    def add(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, offset: int) -> None:
        self.names.append(name)
        self.shapes.append(shape)
        self.dtypes.append(dtype)
        self.offsets.append(offset)
        self._index = None

    def __reduce__(self) -> tuple[Any, tuple]:
        return PackedMeta, (self.names, self.shapes, self.dtypes, self.offsets)

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __getitem__(self, name: str) -> dict[str, Any]:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self.names)}
        return self.entry(self._index[name])

    def entry(self, i: int) -> dict[str, Any]:
        """Tensor ``i``'s metadata as verl's sender writes it."""
        got = self._entries.get(i)
        if got is None:
            got = self._entries[i] = {
                "name": self.names[i],
                "shape": torch.Size(self.shapes[i]),
                "dtype": self.dtypes[i],
                "offset": self.offsets[i],
                "handle": None,
            }
        return got

    def nbytes(self) -> int:
        """The bytes of every tensor (the sender's timing line)."""
        return sum(d.itemsize * math.prod(s) for s, d in zip(self.shapes, self.dtypes))
