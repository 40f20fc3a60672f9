"""The direct weight-sync plan per rollout TP rank, at the real models' shapes: each rank's plan is built alone from
that rank's engine parameters (as each vLLM worker builds its own), and together the ranks' plans must read every
element of every planned checkpoint tensor exactly once and write every element of every FP8 parameter (codes and
block scales) exactly once on each rank. vLLM 0.24.0's mapping tables come from the wheel
(tests/runtime/_vllm_tables.py); the engine parameters are the stand-in of tests/runtime/_qwen_shapes.py."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from fp8spec.runtime.weight_sync.receiver.direct_sync_plan import FP8, SCALE_SUFFIX, Region

from ._plan import build_plan
from ._qwen_shapes import catalog_config, checkpoint, engine_loaders, engine_params
from ._vllm_tables import expert_params_mapping, stacked_params_mapping

pytestmark = pytest.mark.slow  # the vLLM wheel comes from the snapshot cache (downloaded once)


def _plans(case: str, tp: int):
    cfg = catalog_config(case)
    moe = bool(cfg.get("num_experts"))
    stacked = stacked_params_mapping("qwen3_moe" if moe else "qwen3")
    experts = expert_params_mapping(cfg["num_experts"]) if moe else []
    ckpt = checkpoint(cfg)
    out = []
    for rank in range(tp):
        params, parts = engine_params(cfg, tp)
        plan = build_plan(ckpt, params, parts, stacked, experts, rank, tp, loaders=engine_loaders(params))
        out.append((params, plan))
    return ckpt, out


def _overlap(a: Region, b: Region) -> bool:
    return a.r0 < b.r0 + b.rows and b.r0 < a.r0 + a.rows and a.c0 < b.c0 + b.cols and b.c0 < a.c0 + a.cols


def _tiles(regions: list[Region], rows: int, cols: int) -> bool:
    """The regions lie inside rows x cols, do not overlap, and cover it."""
    inside = all(r.r0 >= 0 and r.c0 >= 0 and r.r0 + r.rows <= rows and r.c0 + r.cols <= cols for r in regions)
    apart = not any(_overlap(a, b) for i, a in enumerate(regions) for b in regions[i + 1 :])
    return inside and apart and sum(r.rows * r.cols for r in regions) == rows * cols


@pytest.mark.parametrize("case,tp", [("qwen3-8b", 2), ("qwen3-8b", 4), ("qwen3-30b-a3b", 2)])
def test_the_ranks_plans_read_each_checkpoint_tensor_once_and_fill_each_parameter_once(case, tp):
    ckpt, ranks = _plans(case, tp)
    # every rank plans the same names (each rank's loaders narrow the same full tensor) and leaves the same out
    assert len({frozenset(plan.placements) for _, plan in ranks}) == 1
    assert len({frozenset(plan.copies) for _, plan in ranks}) == 1
    assert len({frozenset(plan.left_out) for _, plan in ranks}) == 1
    assert all(n.endswith("_proj.weight") for n in ranks[0][1].placements)
    # the source side: the ranks' slices of one checkpoint tensor tile it, in elements and in scale blocks
    for name in ranks[0][1].placements:
        m, n = ckpt[name]
        pls = [plan.placements[name] for _, plan in ranks]
        assert _tiles([p.src for p in pls], m, n), name
        assert _tiles([p.src_s for p in pls], math.ceil(m / 128), math.ceil(n / 128)), name
    # the destination side, per rank: every FP8 parameter (each expert's matrix of a stacked one) and its scales
    # are written whole, nothing twice
    for params, plan in ranks:
        dst, dst_s = defaultdict(list), defaultdict(list)
        for p in plan.placements.values():
            dst[p.param, p.expert].append(p.dst)
            dst_s[p.scale, p.expert].append(p.dst_s)
        fp8 = {name: shape for name, (shape, dtype) in params.items() if dtype == FP8}
        experts = {name: (shape[0] if len(shape) == 3 else None) for name, shape in fp8.items()}
        assert {k[0] for k in dst} == set(fp8)
        for (param, expert), regions in dst.items():
            rows, cols = fp8[param][-2:]
            assert _tiles(regions, rows, cols), (param, expert)
            srows, scols = params[param + SCALE_SUFFIX][0][-2:]
            assert _tiles(dst_s[param + SCALE_SUFFIX, expert], srows, scols), (param, expert)
        for param, count in experts.items():
            if count is not None:
                assert {e for p, e in dst if p == param} == set(range(count)), param


def test_the_tiling_check_sees_a_gap_and_an_overlap():
    assert _tiles([Region(0, 64, 0, 128), Region(64, 64, 0, 128)], 128, 128)
    assert not _tiles([Region(0, 64, 0, 128)], 128, 128)  # rows 64-127 never written
    assert not _tiles([Region(0, 96, 0, 128), Region(64, 64, 0, 128)], 128, 128)  # rows 64-95 twice
    assert not _tiles([Region(0, 64, 0, 128), Region(64, 64, 0, 128), Region(128, 1, 0, 128)], 128, 128)
