"""The planner's SGLang KV pool against the pool SGLang 0.5.12 allocated inside a real verl run.

The static FP8-KV SGLang bundle (``specs/tiny-qwen3-h200-sglang.yaml`` with the KV dtype override of
benchmarks/sglang/README.md row 4') ran alone on an H200 (2026-12-01); its log is committed in
tests/data/sglang_run/sglang_rl_fp8kv.tgz. SGLang sizes its pool from the memory free when
it starts (``avail mem`` in its log), which in a colocated run is the GPU less what the trainer holds by then;
the planner's "FP8 W8A8 + fp8_e4m3 KV" column predicts the same pool from the spec alone. Goal: within 5 %.
"""

from __future__ import annotations

import json
import re
import tarfile

from fp8spec.plan.facts import measured
from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO

LOG = REPO / "tests" / "data" / "sglang_run" / "sglang_rl_fp8kv.tgz"
SPEC = REPO / "specs" / "tiny-qwen3-h200-sglang.yaml"
# SGLang 0.5.12 model_runner_kv_cache_mixin.py: "KV Cache is allocated. #tokens: {n}, K size: ..., V size: ..."
ALLOCATED = re.compile(r"KV Cache is allocated\. #tokens: (\d+)")


def _engine_tokens() -> int:
    with tarfile.open(LOG) as tar:
        for m in tar.getmembers():
            if m.name == "rlk/kfp8kv.log":  # the run's own log (not ray-head-kfp8kv.log)
                f = tar.extractfile(m)
                assert f is not None
                found = ALLOCATED.findall(f.read().decode("utf-8", "replace"))
                assert found, "the committed log has no KV allocation line"
                return int(found[0])
    raise AssertionError(f"no kfp8kv.log in {LOG}")


def _planned_tokens() -> int:
    proc = run_cli_here("plan", str(SPEC), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    columns = {c["choice"]: c for c in json.loads(out)["rollout"]}
    fp8kv = [c for c in columns.values() if c["kv_cache"]["dtype"] == "fp8_e4m3"]
    assert len(fp8kv) == 1, sorted(columns)
    return int(fp8kv[0]["kv_cache"]["capacity"]["value"])


def test_planner_within_5_percent_of_sglang_pool_in_the_loop():
    engine, planned = _engine_tokens(), _planned_tokens()
    assert engine == measured("planner.sglang.in_loop_kv_tokens")  # the figure docs/results.md quotes
    assert abs(planned - engine) / engine < 0.05, (planned, engine)
