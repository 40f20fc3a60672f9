"""A whole plan at once, for the tests (the engine's hook places tensors bucket by bucket through the Planner)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from fp8spec.runtime.weight_sync.receiver.direct_sync_plan import DirectPlan, Planner


def build_plan(
    checkpoint: Mapping[str, Sequence[int]],
    params: Mapping[str, tuple[Sequence[int], str]],
    part_rows: Mapping[str, Sequence[int]],
    stacked: Sequence[tuple],
    experts: Sequence[tuple] = (),
    tp_rank: int = 0,
    tp_size: int = 1,
    block: tuple[int, int] = (128, 128),
    expert_to_local: Callable[[int], int] | None = None,
    loaders: Mapping[str, str | None] | None = None,
) -> DirectPlan:
    """Plan every checkpoint tensor (name -> full shape) against the engine's parameters at once."""
    planner = Planner(params, part_rows, stacked, experts, tp_rank, tp_size, block, expert_to_local, loaders)
    for name, shape in checkpoint.items():
        planner.place(name, shape)
    return planner.plan
