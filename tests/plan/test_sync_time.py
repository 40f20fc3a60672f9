"""fp8spec plan's weight-sync time: fitted to the measured syncs (fp8spec/data/weight_sync.yaml), checked against
the probe's own logs and the real 4B run, and absent with its reason where nothing was measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fp8spec.catalog import get_model
from fp8spec.plan import build_memory_plan
from fp8spec.plan.facts import measured
from fp8spec.plan.render import plan_json, render_text
from fp8spec.plan.sync import copy_seconds_per_gb, export_tensors, fits
from fp8spec.rules.plan_columns import judged
from fp8spec.rules.runner import validate_path
from tests.conftest import REPO
from tests.report.runs import SPEC_4B, spec_4b_copy

PROBE = REPO / "benchmarks/results/2026-12-03_h200_weight-sync"
SENT = re.compile(r"sent: (\d+) tensors, \d+ buckets, ([0-9.]+) GiB in")


def _plan(spec: Path):
    """The plan as `fp8spec plan` prints it: judged by the rules."""
    ctx = validate_path(spec, str(spec)).context
    return judged(build_memory_plan(ctx), ctx)


def _spec_4b(tmp: Path, old: str, new: str) -> Path:
    return spec_4b_copy(tmp, old, new)


@pytest.mark.parametrize(
    "model, log",
    [
        ("Qwen/Qwen3-30B-A3B", "wsprobe_30b_bf16_bucket8192/ws_qwen3-30b-a3b_direct.json"),
        ("Qwen/Qwen3-8B", "wsprobe_8b_fp32_bucket8192/wsprobe_fp32_mb8192b/ws_qwen3-8b_direct.json"),
    ],
)
def test_tensors_and_bytes_are_what_the_probe_sent(model, log):
    # the fit's inputs for a measured sync are the catalog's; they must be what the sender logged for that sync
    line = json.loads((PROBE / log).read_text(encoding="utf-8"))["send_split"][-1]["line"]
    tensors, gib = SENT.search(line).groups()
    facts = get_model(model)
    assert export_tensors(facts) == int(tensors)
    assert round(facts.num_parameters() * fits()["direct"].sends / 2**30, 2) == float(gib)


def test_every_fit_passes_its_measured_syncs_within_its_stated_error():
    for fit in fits().values():
        assert len(fit.points) >= len(fit.costs), fit.path
        for p in fit.points:
            assert abs(p.fitted / p.seconds - 1) <= fit.max_error + 1e-12
    assert fits()["direct"].max_error < 0.05  # docs/results.md#weight-sync states these
    assert fits()["verl"].max_error < 0.45


def test_the_fitted_syncs_are_the_measured_figures():
    direct = fits()["direct"]
    assert sorted(p.seconds for p in direct.points) == sorted(
        measured(f)
        for f in ("sync.qwen3_30b_a3b.direct_s", "sync.qwen3_8b.bf16.direct_s", "sync.qwen3_8b.fp32.direct_s")
    )


def test_the_real_4b_run_is_within_its_plan():
    # the send term was fitted on 16-61 GB models, never on this run; the copy term on this run's GPU wait
    s = _plan(SPEC_4B).weight_sync()
    low, high = measured("real_step.direct_sync_s")
    assert s.path == "direct" and s.copy_gb == pytest.approx(16.09, abs=0.01)
    assert 0.8 < low / s.seconds and high / s.seconds < 1.2, (s.seconds, low, high)


def test_without_offload_there_is_no_copy_term(tmp_path):
    spec = _spec_4b(tmp_path, "    params: true\n", "    params: false\n")
    s = _plan(spec).weight_sync()
    assert s.copy_gb == 0 and s.seconds == s.send_s


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("engine: vllm", "engine: sglang", "not measured for sglang"),
        ("gpu: h200", "gpu: h100", "not measured on h100"),
        ("gpus_per_node: 1", "gpus_per_node: 2", "not measured on more than 1 GPU (2 GPUs"),
        ("quantize: true", "quantize: false", "no FP8 weight sync (linear.quantize is off)"),
    ],
)
def test_no_time_outside_what_was_measured(tmp_path, old, new, why):
    plan = _plan(_spec_4b(tmp_path, old, new))
    s = plan.weight_sync()
    assert s.seconds is None and s.why.startswith(why), s.why
    assert plan_json(plan)["weight_sync"]["seconds"] is None
    assert f"no time predicted: {s.why}" in render_text(plan)


def test_a_megatron_trainer_gets_no_time():
    s = _plan(REPO / "specs/tiny-qwen3-moe-megatron-fp8.yaml").weight_sync()
    assert s.seconds is None and s.why == "not measured with the megatron trainer"


def test_plan_shows_the_sync_time_the_same_every_time():
    plan = _plan(SPEC_4B)
    text = render_text(plan)
    assert "Weight sync (the direct path): 0.308 s per sync after the first (estimate)" in text
    assert "0.286 s copying the offloaded 16.09 GB of parameters to the GPU" in text
    data = plan_json(plan)["weight_sync"]
    assert data["seconds"] == {"value": 0.308055, "unit": "s", "status": "estimate"}
    assert data["send"]["bytes"]["value"] == plan.model.num_parameters() * 2
    again = _plan(SPEC_4B)
    assert (render_text(again), json.dumps(plan_json(again))) == (text, json.dumps(plan_json(plan)))


def test_the_results_page_states_the_fitted_costs_and_errors():
    text = (REPO / "docs/results.md").read_text(encoding="utf-8")
    f = fits()
    direct, fbq, verl = (dict(f[p].costs) for p in ("direct", "fp8spec", "verl"))
    for stated in (
        f"{direct['fixed'] * 1000:.1f} ms",
        f"{direct['per_gb'] * 1000:.2f} ms per GB",
        f"within {f['direct'].max_error * 100:.0f} % of its three syncs",
        f"{fbq['fixed'] * 1000:.1f} ms + {fbq['per_tensor'] * 1000:.3f} ms per tensor",
        f"{verl['fixed'] * 1000:.1f} ms + {verl['per_tensor'] * 1000:.3f} ms per tensor",
        f"within {f['verl'].max_error * 100:.0f} % of its five syncs",
        f"{copy_seconds_per_gb() * 1000:.1f} ms per GB",
    ):
        assert stated in " ".join(text.split()), stated


@pytest.mark.parametrize("quantizer, label", [("verl", "verl's quantizer"), ("fp8spec", "fast_block_quant")])
def test_the_quantizing_paths_cost_per_tensor(tmp_path, quantizer, label):
    # their fits grow with the tensors of the trainer's export, and they send FSDP's float32 parameters as held
    spec = _spec_4b(tmp_path, "  deep_gemm: false\n", f"  deep_gemm: false\n  sync_quantizer: {quantizer}\n")
    plan = _plan(spec)
    s = plan.weight_sync()
    costs = dict(fits()[quantizer].costs)
    assert (s.path, s.label, s.tensors) == (quantizer, label, 398)
    assert s.send_s == costs["fixed"] + costs["per_tensor"] * 398
    assert s.send_gb == plan.model.num_parameters() * 4 / 1e9
    assert "measured syncs of 399-18,867 tensors" in render_text(plan)
