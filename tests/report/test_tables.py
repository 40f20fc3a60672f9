"""Each real run kept in tests/data/report/ gives its per-step table (numbers checked by hand against the log
lines) and its verdicts; the clean runs raise only RPT034 (they predate replay_poll)."""

from __future__ import annotations

import pytest

from fp8spec.report.build import make_report
from tests.report.runs import BUNDLE_DIRECT, DATA, SPEC_4B, bundle_of

# Every run kept here predates the runtime patch replay_poll: verl's 2 s poll rounded its generation times (RPT034).
ROUNDED = ["RPT034"]


def _codes(rep) -> list[str]:
    return [f.code for f in rep.findings]


def test_the_4b_run_reads_as_its_log_says():
    rep = make_report(DATA / "real-4b" / "real-4b-h200-fp8kv.log")
    rows = rep.ctx.rows
    assert [r.step for r in rows] == [1, 2, 3]
    one = rows[0]
    # step:1 - ... timing_s/gen:10.091228711000042 ... timing_per_token_ms/gen:0.07725519982085745
    assert one.gen_s == pytest.approx(10.091228711000042)
    assert one.tokens_per_s == pytest.approx(1000 / 0.07725519982085745)
    assert one.old_log_prob_s == pytest.approx(25.36532416099999)
    assert one.update_s == pytest.approx(99.28729320099995)
    assert one.sync_s == pytest.approx(1.0950228709999692)
    assert one.step_s == pytest.approx(163.15663475900004)
    assert (one.response_mean, one.response_max) == (510.2421875, 512.0)
    assert one.mismatch_kl == pytest.approx(0.06760001182556152)
    assert one.is_mean == pytest.approx(0.9925652742385864)
    assert one.clip_fraction == pytest.approx(0.01940714381635189)
    assert one.rollout_corr["k3_kl"] == pytest.approx(0.06659217923879623)
    assert (
        one.ref_s is None and one.preempted is None
    )  # no reference policy; this verl path logs no preemptions
    # sync 2 (after step 1's update): "weight sync sent: 507 tensors, 9 buckets, 8.22 GiB in 0.353 s"
    assert [r.patch_sync_s for r in rows] == [0.353, 0.359, 0.351]
    # "applied 108 q/k/v scales ... (k [0.0260937, 0.0303125] q [0.0271875, 0.0323437] v [0.0540625, 0.065])"
    assert one.kv_scale_range == (0.0260937, 0.065)
    assert rows[2].mismatch_kl == pytest.approx(0.06707796454429626)
    assert rep.ctx.run.of("kv_cache_size")[0].groups["tokens"] == 1_351_808
    assert rep.ctx.run.finished and _codes(rep) == ROUNDED


def test_the_4b_run_against_its_bundle_and_plan_is_clean():
    """The 4B bundle compiled direct_sync + kv_scales, as the golden FSDP + vLLM bundle does; its spec's plan
    predicts the KV capacity within 0.2 %."""
    rep = make_report(DATA / "real-4b", bundle=BUNDLE_DIRECT, spec=SPEC_4B)
    assert _codes(rep) == ROUNDED
    assert rep.ctx.plan is not None and rep.ctx.plan.kv_cache_tokens == 1_354_656
    assert rep.ctx.plan.gain_low == pytest.approx(0.39)


def test_the_4b_ray_worker_logs_alone_give_the_same_table():
    folder = make_report(DATA / "real-4b" / "ray-logs")
    driver = make_report(DATA / "real-4b" / "real-4b-h200-fp8kv.log")
    assert folder.ctx.rows == [
        r.__class__(**{**r.__dict__, "where": f.where}) for r, f in zip(driver.ctx.rows, folder.ctx.rows)
    ]
    assert _codes(folder) == ROUNDED


def test_the_driver_log_and_the_worker_logs_together_count_each_line_once():
    rep = make_report(DATA / "real-4b")
    assert [r.step for r in rep.ctx.rows] == [1, 2, 3]
    assert len(rep.ctx.run.of("kv_applied")) == 3 and len(rep.ctx.run.of("sync_sent")) == 4


def test_the_fsdp_vllm_run(tmp_path):
    rep = make_report(DATA / "fsdp-vllm", bundle=bundle_of(tmp_path, "fsdp-vllm"))
    rows = rep.ctx.rows
    assert [r.step for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0].gen_s == pytest.approx(2.0932924779999666)
    assert rows[0].mismatch_kl == pytest.approx(0.006044715642929077)
    assert rows[0].patch_sync_s == 0.015  # "fast_block_quant: weight sync received in 0.015 s" (sync 2)
    assert rep.ctx.bundle.sync_path == "fast_block_quant"
    assert _codes(rep) == ROUNDED


def test_the_megatron_te_run_crashed_after_step_3(tmp_path):
    rep = make_report(DATA / "megatron-te", bundle=bundle_of(tmp_path, "megatron-te"))
    assert [r.step for r in rep.ctx.rows] == [1, 2, 3]
    assert rep.ctx.rows[1].update_s == pytest.approx(11.93, abs=0.01)
    assert len(rep.ctx.run.of("te_phase")) == 7  # every pass ran its TE modules in FP8: RPT004 stays quiet
    assert _codes(rep) == ["RPT020", *ROUNDED]
    assert "crashed after step 3: ray.exceptions.ActorUnavailableError" in rep.findings[0].message
    assert rep.findings[0].where.endswith("tiny-qwen3-moe-megatron-fp8.log:33")


def test_the_sglang_run_has_verl_metrics_and_no_patch_lines():
    rep = make_report(DATA / "sglang")
    assert [r.step for r in rep.ctx.rows] == [1, 2, 3, 4, 5]
    assert rep.ctx.rows[0].mismatch_kl == pytest.approx(0.007103556767106056)
    assert all(r.patch_sync_s is None and r.kv_scale_range is None for r in rep.ctx.rows)
    assert _codes(rep) == ROUNDED


def test_the_moe_direct_sync_run_and_its_tiny_rising_kl(tmp_path):
    """A tiny random MoE model's KL rises x18 over steps 3-5 (7e-05 to 1.3e-03): below the floor, noise, not a
    trend (fp8spec/data/report_thresholds.yaml mismatch_kl.floor)."""
    rep = make_report(DATA / "moe-direct", bundle=bundle_of(tmp_path, "moe-direct"))
    rows = rep.ctx.rows
    assert [r.step for r in rows] == [1, 2, 3, 4, 5]
    assert [r.mismatch_kl for r in rows][2:] == pytest.approx([7.022e-05, 0.0009077, 0.001266], rel=1e-3)
    assert rows[0].patch_sync_s == 0.045 and rep.ctx.bundle.sync_path == "direct_sync"
    assert _codes(rep) == ROUNDED


def test_each_engines_kv_capacity_line_is_read():
    """vLLM's "GPU KV cache size: N tokens" and SGLang's "KV Cache is allocated. #tokens: N" (the engines'
    log.kv_cache_size facts in backends/)."""
    vllm = make_report(DATA / "real-4b" / "real-4b-h200-fp8kv.log").ctx.run.of("kv_cache_size")
    sglang = make_report(DATA / "sglang-engine").ctx.run.of("kv_cache_size")
    assert [e.groups["tokens"] for e in vllm] == [1_351_808]
    assert [e.groups["tokens"] for e in sglang] == [6_859_524]


def test_worker_logs_without_the_progress_bar_finish_at_the_configured_total(tmp_path):
    """The progress bar is in the task runner's stderr; without it, the trainer's total_training_steps from the
    config verl printed (3 in the 4B run) says the run finished."""
    folder = tmp_path / "ray-logs"
    folder.mkdir()
    for log in (DATA / "real-4b" / "ray-logs").glob("*.out"):
        (folder / log.name).write_bytes(log.read_bytes())
    rep = make_report(folder)
    assert rep.ctx.run.progress is None and rep.ctx.run.total_steps == 3
    assert rep.ctx.run.finished and _codes(rep) == ROUNDED
    cut = tmp_path / "cut"
    cut.mkdir()
    driver = (
        (DATA / "real-4b" / "real-4b-h200-fp8kv.log").read_text(encoding="utf-8").splitlines(keepends=True)
    )
    kept = [ln for ln in driver if "Training Progress" not in ln and "step:3 -" not in ln]
    (cut / "driver.log").write_text("".join(kept[: kept.index(next(ln for ln in kept if "Traceback" in ln))]))
    assert [f.message for f in make_report(cut).findings] == [
        "run still running or crashed after step 2 of 3 (no traceback in the logs read)"
    ]
