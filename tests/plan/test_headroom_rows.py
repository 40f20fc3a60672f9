"""The plan's headroom can be checked by hand from the rows above it, and a CUDA graph estimate of zero says why."""

from __future__ import annotations

import re

from fp8spec.plan.plan import spec_memory_plan
from fp8spec.plan.render import render_text
from fp8spec.rules.plan_columns import judged
from tests.conftest import BASE_SPEC, MOE, patched


def _printed(ctx) -> str:
    return render_text(judged(spec_memory_plan(ctx), ctx))


def _row(text: str, name: str) -> float:
    m = re.search(rf"^  {re.escape(name)}\s+([0-9.]+) GiB", text, re.M)
    assert m, (name, text)
    return float(m.group(1))


def test_headroom_is_the_gpu_minus_the_rows_above_it(validate):
    text = _printed(validate(BASE_SPEC).context)
    total = float(re.search(r"([0-9.]+) GiB per GPU\)", text).group(1))
    kept = _row(text, "kept during rollout")
    engine = _row(text, "engine request + beyond (measured)")
    assert abs(total - kept - engine - _row(text, "headroom beside the rollout engine")) <= 0.02


def test_a_zero_cuda_graph_estimate_says_why(validate):
    dense = _printed(validate(BASE_SPEC).context)  # Qwen3: vLLM 0.24's V2 runner
    assert re.search(r"CUDA graph estimate\s+0\.00 GiB", dense)
    assert "note: CUDA graph estimate 0.00 GiB: this vLLM release runs this architecture on its V2 model runner" in dense
    moe = _printed(validate(patched(BASE_SPEC, MOE, {"rollout": {"tp": 2}})).context)  # V1 runner
    assert not re.search(r"CUDA graph estimate\s+0\.00 GiB", moe) and "V2 model runner, whose" not in moe
