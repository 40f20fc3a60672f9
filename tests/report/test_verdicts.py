"""Every verdict of fp8spec report fires on a damaged copy of a real run and stays quiet on the real run: the
damage (a patch's lines dropped, KV-scale lines gone after step 2, the mismatch KL scaled up per step, a log cut
mid-line, a traceback after step 2, ...) is made here from the real lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fp8spec.report.build import make_report
from fp8spec.report.render import comparison, render_text
from fp8spec.report.verdicts import all_verdicts, get_verdict
from tests.conftest import REPO
from tests.report import runs
from tests.report.runs import BUNDLE_DIRECT, SPEC_4B

KL = "rollout_corr/kl"


def _4b(tmp: Path, damage=None, **kw):
    return make_report(runs.log_copy(tmp, "real-4b", damage), **kw)


def _tiny(tmp: Path, damage=None, **kw):
    return make_report(runs.log_copy(tmp, "fsdp-vllm", damage), bundle=runs.bundle_of(tmp, "fsdp-vllm"), **kw)


def _baseline(tmp: Path, ms_factor: float) -> Path:
    """The 4B run as a slower BF16 run would log it: generation's ms per token times ``ms_factor``."""
    sub = tmp / "baseline"
    sub.mkdir()
    return runs.log_copy(
        sub, "real-4b", runs.set_metric("timing_per_token_ms/gen", lambda s, v: v * ms_factor)
    )


SENT = re.compile(r"(fp8spec weight sync sent: .* in )([0-9.]+)( s:)")


def _4b_syncs(tmp: Path, factor: float = 1.0, **kw):
    """The 4B run with its worker logs, each whole sync after the first ``factor`` times slower (in the worker's
    log and in the driver's copy of its lines)."""
    folder = runs.folder_copy(tmp, "real-4b")
    for log in sorted(p for p in folder.rglob("*") if p.is_file()):
        seen = [0]

        def slower(m, seen=seen):
            seen[0] += 1
            seconds = float(m.group(2)) * (factor if seen[0] > 1 else 1.0)
            return f"{m.group(1)}{seconds:.3f}{m.group(3)}"

        log.write_text(SENT.sub(slower, log.read_text(encoding="utf-8")), encoding="utf-8")
    return make_report(folder, **kw)


def _te_outside(lines):
    return [ln.replace("fwd FP8 1180/1180", "fwd FP8 1176/1180", 1) for ln in lines]


_REFUSED = (
    "(WorkerDict pid=3914) fp8spec.runtime.version_guard.UnsupportedVersionError: fp8spec-runtime 0.1.0 patch "
    "'kv_scales' supports vllm 0.24.0, 0.33.0 but 0.25.0 is installed; refusing to patch (set "
    "FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS=1 to override).\n"
)

# code -> (fires, stays quiet): each a function of the test's folder giving a report.
CASES = {
    "RPT001": (
        lambda t: _4b(t, runs.drop("fp8spec direct_sync: "), bundle=BUNDLE_DIRECT),
        lambda t: _4b(t, bundle=BUNDLE_DIRECT),
    ),
    "RPT002": (
        lambda t: make_report(
            runs.log_copy(t, "fsdp-vllm"), bundle=BUNDLE_DIRECT
        ),  # compiled direct, ran fbq
        lambda t: _4b(t, bundle=BUNDLE_DIRECT),
    ),
    "RPT003": (
        lambda t: _4b(t, runs.drop_after_step("fp8spec kv_scales: ", 2), bundle=BUNDLE_DIRECT),
        lambda t: _4b(t, bundle=BUNDLE_DIRECT),
    ),
    "RPT004": (
        lambda t: make_report(runs.log_copy(t, "megatron-te", _te_outside)),
        lambda t: make_report(runs.log_copy(t, "megatron-te")),
    ),
    "RPT005": (lambda t: _4b(t, lambda lines: lines + [_REFUSED]), lambda t: _4b(t)),
    "RPT006": (
        lambda t: make_report(runs.log_copy(t, "fsdp-vllm"), bundle=BUNDLE_DIRECT),  # an older bundle's run
        lambda t: _4b(t, bundle=BUNDLE_DIRECT),
    ),
    "RPT010": (lambda t: _4b(t, runs.set_metric(KL, lambda s, v: v * 3**s)), lambda t: _4b(t)),
    "RPT011": (
        lambda t: _tiny(
            t, runs.set_metric("rollout_corr/rollout_is_mean", lambda s, v: 1.25 if s == 4 else v)
        ),
        lambda t: _tiny(t),
    ),
    "RPT012": (
        lambda t: _4b(t, runs.set_metric("rollout_corr/rollout_is_ratio_fraction_high", lambda s, v: v * 10)),
        lambda t: _4b(t),
    ),
    "RPT013": (
        lambda t: _tiny(t, runs.set_metric(KL, lambda s, v: 6.0 if s == 5 else v)),
        lambda t: _tiny(t),
    ),
    "RPT020": (lambda t: _4b(t, runs.end_after_step(2, runs.real_traceback())), lambda t: _4b(t)),
    "RPT021": (lambda t: _tiny(t, runs.end_after_step(3)), lambda t: _tiny(t)),
    "RPT022": (lambda t: _tiny(t, runs.cut_mid_line(3)), lambda t: _tiny(t)),
    "RPT030": (
        lambda t: _4b(
            t, lambda ls: [ln.replace("1,351,808 tokens", "1,051,808 tokens") for ln in ls], spec=SPEC_4B
        ),
        lambda t: _4b(t, spec=SPEC_4B),
    ),
    "RPT031": (
        lambda t: _tiny(t, runs.set_metric("timing_s/update_weights", lambda s, v: v * 20 if s == 4 else v)),
        lambda t: _tiny(t),
    ),
    "RPT033": (
        lambda t: _4b_syncs(t, 3.0, spec=SPEC_4B),
        lambda t: _4b_syncs(t, spec=SPEC_4B),
    ),
    "RPT034": (
        lambda t: _4b(t),  # 10.09, 10.12, 8.13 s: each just past an even second
        lambda t: _4b(t, runs.set_metric("timing_s/gen", lambda s, v: v + 1.0)),
    ),
    "RPT035": (
        # the same run and spec but an attention that keeps packed sequences apart: the plan now fits a budget
        lambda t: _4b(t, spec=runs.spec_4b_copy(t, "attention: sdpa", "attention: flash_attention_2")),
        lambda t: _4b(t, spec=SPEC_4B),  # sdpa: no packing budget (PAR016)
    ),
    "RPT032": (
        lambda t: _4b(t, spec=SPEC_4B, baseline=_baseline(t, 1.1)),  # FP8 only 10 % faster: below +39 %
        lambda t: _4b(t, spec=SPEC_4B, baseline=_baseline(t, 1.5)),  # 50 % faster
    ),
}


def test_every_verdict_has_a_case_that_fires_and_one_that_stays_quiet():
    assert sorted(CASES) == [v.code for v in all_verdicts()]


@pytest.mark.parametrize("code", sorted(CASES))
def test_verdict_fires_on_the_damaged_run(code, tmp_path):
    rep = CASES[code][0](tmp_path)
    fired = [f for f in rep.findings if f.code == code]
    assert fired, [(f.code, f.message) for f in rep.findings]
    says = get_verdict(code).example[1]  # what `fp8spec rules CODE` promises the message says
    assert any(says in f.message for f in fired), ([f.message for f in fired], says)
    for f in fired:
        assert f.where and f.message and f.hint
        # located: a file:line of the logs, or the bundle file the expectation comes from
        assert ":" in f.where or f.where.endswith("preflight.json"), f.where


@pytest.mark.parametrize("code", sorted(CASES))
def test_verdict_stays_quiet_on_the_real_run(code, tmp_path):
    rep = CASES[code][1](tmp_path)
    assert [f.code for f in rep.findings if f.code == code] == []


def test_an_excluded_module_with_fp8_weights_fires(tmp_path):
    def fp8_router(lines):
        return [
            ln.replace("router:bfloat16", "router:float8_e4m3fn") if "fwd FP8 1160/1160" in ln else ln
            for ln in lines
        ]

    rep = make_report(runs.log_copy(tmp_path, "megatron-te", fp8_router))
    msgs = [f.message for f in rep.findings if f.code == "RPT004"]
    assert msgs == [
        "old_log_prob: modules meant to stay out of FP8 have FP8 weights: router:float8_e4m3fn",
        "update: modules meant to stay out of FP8 have FP8 weights: router:float8_e4m3fn",
    ]


def test_stale_kv_scales_name_the_last_applied_line(tmp_path):
    rep = CASES["RPT003"][0](tmp_path)
    (f,) = [f for f in rep.findings if f.code == "RPT003"]
    assert "applied 2 time(s) for 3 calibrated step(s); none after" in f.message


def test_kv_scales_not_reapplied_after_a_wake_up_fire(tmp_path):
    rep = _4b(tmp_path, runs.drop_after_step("re-applied q/k/v scales", 1))
    msgs = [f.message for f in rep.findings if f.code == "RPT003"]
    assert msgs == ["scales re-applied after 1 of 3 KV-cache wake-ups; the others ran on reset scales"]


def test_a_crash_says_after_which_step_and_the_exception(tmp_path):
    rep = CASES["RPT020"][0](tmp_path)
    (f,) = [f for f in rep.findings if f.code == "RPT020"]
    assert f.message.startswith("the run crashed after step 2: ray.exceptions.ActorUnavailableError")
    assert [r.step for r in rep.ctx.rows] == [1, 2]


def test_a_run_that_stops_says_still_running_or_crashed(tmp_path):
    rep = CASES["RPT021"][0](tmp_path)
    (f,) = [f for f in rep.findings if f.code == "RPT021"]
    assert f.message.startswith("run still running or crashed after step 3 of 5")


def test_a_log_cut_mid_line_keeps_the_complete_values_of_the_step(tmp_path):
    rep = CASES["RPT022"][0](tmp_path)
    assert [r.step for r in rep.ctx.rows] == [1, 2, 3]
    (tmp_path / "whole").mkdir()
    whole = _tiny(tmp_path / "whole").ctx.rows[2]
    cut = rep.ctx.rows[2]
    assert cut.mismatch_kl == whole.mismatch_kl  # KL comes early in the line: read; the cut value is not
    (f,) = [f for f in rep.findings if f.code == "RPT022"]
    assert "ends in the middle of this step's line" in f.message


def test_two_runs_in_one_folder_are_not_mixed(tmp_path):
    runs.log_copy(tmp_path, "fsdp-vllm")
    runs.log_copy(tmp_path, "sglang")
    rep = make_report(tmp_path)
    alone = make_report(runs.DATA / "fsdp-vllm")
    assert [r.mismatch_kl for r in rep.ctx.rows] == [r.mismatch_kl for r in alone.ctx.rows]  # the first kept
    again = [f.message for f in rep.findings if f.code == "RPT022"]
    assert len(again) == 5 and all("logged again with other values" in m for m in again)


def _4b_spec_on(tmp: Path, engine: str) -> Path:
    """The 4B run's spec with another rollout engine."""
    return runs.spec_4b_copy(tmp, "engine: vllm", f"engine: {engine}")


def test_slow_syncs_against_a_plan_without_a_sync_time_say_why(tmp_path):
    # the same damaged run fires RPT033 against its own spec (CASES); on SGLang the plan has no sync time
    rep = _4b_syncs(tmp_path, 3.0, spec=_4b_spec_on(tmp_path, "sglang"))
    assert [f.code for f in rep.findings if f.code == "RPT033"] == []
    ws = comparison(rep.ctx)["weight_sync_s"]
    assert (ws["planned"], ws["planned_why"], ws["whole_median"]) == (None, "not measured for sglang", 1.065)
    assert "fp8spec plan has no sync time for the spec (verl's quantizer: not measured for sglang)" in (
        render_text(rep)
    )


def test_sync_comparison_uses_whole_syncs_from_step_2_on(tmp_path):
    rep = _4b_syncs(tmp_path, spec=SPEC_4B)
    ws = comparison(rep.ctx)["weight_sync_s"]
    # sent lines 2.839 (the first, before step 1), 0.353, 0.359, 0.351: steps 2 and 3 hold the last two
    assert ws["whole_median"] == 0.355
    assert ws["planned"] == 0.3081 and ws["ratio"] == 1.1524
    assert "0.355 s whole sync from step 2 on, 0.3081 s planned (the direct path), 1.15x" in render_text(rep)


def test_a_sync_a_few_hundredths_over_a_tiny_plan_stays_quiet_and_tenfold_fires(tmp_path):
    # the tiny MoE run's syncs (0.013-0.021 s from step 2 on) are 2.7x the tiny spec's 0.0075 s but 0.013 s over
    spec = REPO / "specs/tiny-qwen3-h200.yaml"
    quiet = make_report(runs.log_copy(tmp_path, "moe-direct"), spec=spec)
    ws = comparison(quiet.ctx)["weight_sync_s"]
    assert ws["ratio"] > 2 and ws["whole_median"] - ws["planned"] < 0.1
    assert [f.code for f in quiet.findings if f.code == "RPT033"] == []
    (tmp_path / "slow").mkdir()
    slow = make_report(runs.log_copy(tmp_path / "slow", "moe-direct", _sent_times(10.0)), spec=spec)
    assert [f.code for f in slow.findings if f.code == "RPT033"] == ["RPT033"]


def _sent_times(factor: float):
    return lambda lines: [
        SENT.sub(lambda m: f"{m.group(1)}{float(m.group(2)) * factor:.3f}{m.group(3)}", ln) for ln in lines
    ]


ENGINE_SYNC = re.compile(r"(fp8spec direct_sync: sync (\d+): .*, )([0-9.]+)( s)$")


def _engine_syncs(factor: float):
    """The 4B driver log without the trainer's sent lines, the direct path's engine lines from sync 3 on
    ``factor`` times slower."""

    def damage(lines):
        out = []
        for ln in runs.drop("fp8spec weight sync sent: ")(lines):
            body = ln.rstrip("\n")
            m = ENGINE_SYNC.search(body)
            if m and int(m.group(2)) >= 3:
                body = body[: m.start(3)] + f"{float(m.group(3)) * factor:.3f}" + body[m.end(3) :]
            out.append(body + ("\n" if ln.endswith("\n") else ""))
        return out

    return damage


def _with_layout(classes: str, planned: str):
    """The real run's te_report lines as a run with a per-module layout writes them."""

    def damage(lines):
        part = f"; by class {classes}; planned BF16 {planned}; BF16 kept:"
        return [ln.replace("; BF16 kept:", part, 1) if "te_report: " in ln else ln for ln in lines]

    return damage


def test_without_the_sent_line_the_direct_engine_line_times_the_sync(tmp_path):
    rep = _4b(tmp_path, _engine_syncs(1.0), spec=SPEC_4B)
    ws = comparison(rep.ctx)["weight_sync_s"]
    assert ws["whole_median"] == 0.3375  # syncs 3 and 4: 0.339 and 0.336 s
    assert [f.code for f in rep.findings if f.code == "RPT033"] == []
    (tmp_path / "slow").mkdir()
    slow = _4b(tmp_path / "slow", _engine_syncs(3.0), spec=SPEC_4B)
    (f,) = [f for f in slow.findings if f.code == "RPT033"]
    assert "weight sync 1.01 s (median from step 2 on), 3.3x the 0.308 s" in f.message


def test_an_engine_only_sync_line_is_not_compared_with_the_plan(tmp_path):
    # fast_block_quant's 'received in X s' times only the engine's part (0.011-0.015 s against verl's 0.17-0.25 s
    # around the whole sync): the plan's whole-sync time has nothing to be compared with, and the report says so
    rep = _tiny(tmp_path, spec=REPO / "specs/tiny-qwen3-h200.yaml")
    ws = comparison(rep.ctx)["weight_sync_s"]
    assert ws["patch_median"] is not None and ws["planned"] is not None
    assert (ws["whole_median"], ws["ratio"]) == (None, None)
    assert [f.code for f in rep.findings if f.code == "RPT033"] == []
    assert "no whole-sync line from step 2 on to compare" in render_text(rep)


def _te_messages(tmp_path, classes, planned):
    rep = make_report(runs.log_copy(tmp_path, "megatron-te", _with_layout(classes, planned)))
    return sorted({f.message for f in rep.findings if f.code == "RPT004"})


def test_a_layout_that_took_effect_is_quiet(tmp_path):
    assert _te_messages(tmp_path, "attention 472/472, core_attention 236/236, experts 0/472", "experts") == []


def test_a_class_planned_bf16_that_ran_fp8_fires(tmp_path):
    assert _te_messages(tmp_path, "attention 472/472, experts 472/472", "experts") == [
        "old_log_prob: 472 of 472 experts TE module calls ran FP8; the layout keeps experts in BF16",
        "update: 472 of 472 experts TE module calls ran FP8; the layout keeps experts in BF16",
    ]


def test_a_bf16_class_the_layout_did_not_plan_fires(tmp_path):
    assert _te_messages(tmp_path, "attention 472/472, first_last 0/236, experts 0/472", "first_last") == [
        "old_log_prob: 472 of 472 experts TE module calls ran outside FP8",
        "update: 472 of 472 experts TE module calls ran outside FP8",
    ]
