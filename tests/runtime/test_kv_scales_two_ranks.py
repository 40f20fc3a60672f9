"""The KV-scale calibration's one collective, across two real processes: torch.distributed over gloo (CPU), a file
store, world size 2. Each rank runs the runtime's own ``scales_for_sync`` (the all-reduce(MAX) of the running amax,
then the named scales every rank pushes with the weight sync), as the trainer's ranks do on a two- or four-GPU
machine: data-parallel ranks that saw different batches, pipeline stages that saw different layers (the hooks read
Megatron's global ``layer_number``), and a rank that saw nothing."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from fp8spec.runtime.kv_scales.kv_calibration import KVScaleCalibrator
from fp8spec.runtime.kv_scales.kv_hooks import scales_for_sync

LAYERS = 4
MODES = ("per_step", "once")
# per rank, per case: (layer, q amax, k amax, v amax) observed before the sync
OBSERVED = {
    "data_parallel": [[(0, 2.0, 1.0, 0.5), (1, 1.0, 1.0, 1.0)], [(0, 1.0, 3.0, 0.25), (1, 4.0, 0.5, 2.0)]],
    "pipeline_stages": [[(0, 1.0, 2.0, 3.0), (1, 2.0, 2.0, 2.0)], [(2, 5.0, 1.0, 1.0), (3, 1.0, 6.0, 0.5)]],
    "one_rank_idle": [[(3, 7.0, 8.0, 9.0)], []],
}


def _tensor(amax: float, rank: int) -> torch.Tensor:
    # the amax sits at a rank-dependent place, with the opposite sign elsewhere below it
    t = torch.full((2, 3, 8), -amax / 2)
    t.view(-1)[rank * 5] = amax if rank % 2 == 0 else -amax
    return t


class CoreAttention(nn.Module):
    """Where Megatron's Attention hands post-RoPE q/k/v to its core attention; ``layer_number`` is global (1-based,
    the pipeline offset included), as in megatron-core."""

    def __init__(self, layer_number: int):
        super().__init__()
        self.layer_number = layer_number

    def forward(self, query, key, value, attention_mask=None):
        return query


def _stage(layer_numbers: list[int]) -> nn.Module:
    model = nn.Module()
    model.decoder = nn.Module()
    model.decoder.layers = nn.ModuleList()
    for n in layer_numbers:
        layer = nn.Module()
        layer.self_attention = nn.Module()
        layer.self_attention.core_attention = CoreAttention(n)
        model.decoder.layers.append(layer)
    return model


def _one_case(rank: int, case: str, recalibrate: str) -> list:
    os.environ["FP8SPEC_KV_RECALIBRATE"] = recalibrate  # read at each sync, as the runtime reads it
    cal = KVScaleCalibrator(LAYERS)
    rows = OBSERVED[case][rank]
    # every observation goes through the Megatron pre-hook of a module holding that global layer number
    model = _stage(sorted({layer + 1 for layer, *_ in rows}))
    assert cal.attach_megatron(model) == len({layer for layer, *_ in rows})
    core = {m.layer_number - 1: m for m in model.modules() if isinstance(m, CoreAttention)}
    with cal.calibrating():
        for layer, q, k, v in rows:
            core[layer](_tensor(q, rank), _tensor(k, rank), _tensor(v, rank))
    syncs = [scales_for_sync(cal)]
    # a second sync after more data on rank 0 only: per_step takes it, once keeps the first scales
    if rank == 0:
        with cal.calibrating():
            core[min(core)](_tensor(100.0, rank), _tensor(100.0, rank), _tensor(100.0, rank))
    syncs.append(scales_for_sync(cal))
    return [[[n, float(t)] for n, t in named] for named in syncs]


def _rank_main(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        result = {f"{case}/{mode}": _one_case(rank, case, mode) for case in OBSERVED for mode in MODES}
        with open(f"{out}.{rank}", "w", encoding="utf-8") as fh:
            json.dump(result, fh)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Both ranks' pushed scales per case and mode, from one two-process run."""
    if dist.is_initialized():  # a forked rank would inherit this process's group
        pytest.skip("a process group is already initialized in this process")
    tmp = tmp_path_factory.mktemp("kv-two-ranks")
    mp.start_processes(_rank_main, args=(str(tmp / "store"), str(tmp / "out")), nprocs=2, join=True,
                       start_method="fork")  # spawn would import torch again in each rank (seconds each on two cores)
    return [json.loads((tmp / f"out.{r}").read_text(encoding="utf-8")) for r in range(2)]


def _expected(case: str) -> list[tuple[str, float]]:
    amax: dict[int, list[float]] = {}
    for rows in OBSERVED[case]:
        for layer, *vals in rows:
            amax[layer] = [max(a, b) for a, b in zip(amax.get(layer, [0.0] * 3), vals)]
    div = KVScaleCalibrator(LAYERS).divisors
    return [[f"model.layers.{layer}.self_attn.attn.{kind}_scale", float(torch.tensor(amax[layer][j])
                                                                       / torch.tensor(div[j]))]
            for layer in sorted(amax) for j, kind in enumerate("qkv")]


@pytest.mark.parametrize("case", sorted(OBSERVED))
def test_every_rank_pushes_the_same_scales_the_max_over_ranks(ranks, case):
    rank0, rank1 = (r[f"{case}/per_step"] for r in ranks)
    assert rank0[0] == rank1[0] == _expected(case)
    # the next sync: rank 0's larger values reach rank 1 too (the amax was reset after the first sync)
    first = min(layer for layer, *_ in OBSERVED[case][0])
    assert rank0[1] == rank1[1]
    assert [n for n, _ in rank0[1]] == [f"model.layers.{first}.self_attn.attn.{k}_scale" for k in "qkv"]
    assert [v for _, v in rank0[1]] == [pytest.approx(100.0 / d) for d in KVScaleCalibrator(LAYERS).divisors]


@pytest.mark.parametrize("case", sorted(OBSERVED))
def test_with_recalibrate_once_both_ranks_keep_the_first_scales(ranks, case):
    rank0, rank1 = (r[f"{case}/once"] for r in ranks)
    assert rank0 == rank1 == [_expected(case)] * 2
