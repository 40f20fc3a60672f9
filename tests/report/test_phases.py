"""The report's step line: where a real run's step time goes and what the rollout's FP8 gain can save in it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fp8spec.report.build import make_report
from fp8spec.report.phases import OTHER, PHASES, saving, split, step_budget
from fp8spec.report.render import render_json, render_text
from tests.report import runs
from tests.report.runs import SPEC_4B, WINDOW_SPEC


def _rows(tmp, topic="real-4b", damage=None, **kw):
    return make_report(runs.log_copy(tmp, topic, damage), **kw)


@pytest.mark.parametrize("topic", sorted(runs.LOGS))
def test_the_phases_of_every_real_step_add_up_to_its_time(topic, tmp_path):
    rep = _rows(tmp_path, topic)
    assert rep.ctx.rows
    for r in rep.ctx.rows:
        parts = split(r)
        assert [label for label, _ in parts] == [label for _, label in PHASES] + [OTHER]
        assert all(v >= 0 for _, v in parts)
        assert sum(v for _, v in parts) == pytest.approx(r.step_s, rel=1e-6, abs=1e-3), r.step


def test_the_4b_run_spends_a_tenth_of_its_step_generating(tmp_path):
    rep = _rows(tmp_path)
    b = step_budget(rep.ctx.rows, (0.39, 0.44))
    assert b is not None and b.steps == [2, 3]  # step 1 also builds the engine's graphs and the first sync
    later = [r for r in rep.ctx.rows if r.step > 1]
    assert b.shares["generation"] == pytest.approx(sum(r.gen_s for r in later) / sum(r.step_s for r in later))
    assert 0.08 < b.shares["generation"] < 0.10
    assert b.shares["update"] > 0.6
    assert b.expected_saving == pytest.approx(
        (saving(b.shares["generation"], 0.39), saving(b.shares["generation"], 0.44))
    )
    assert 0.03 < b.expected_saving[0] < b.expected_saving[1] < 0.04


def test_no_expected_gain_no_saving_and_no_timed_step_no_budget(tmp_path):
    rep = _rows(tmp_path)
    assert step_budget(rep.ctx.rows, (None, None)).expected_saving is None
    assert step_budget([], (0.39, 0.44)) is None
    untimed = [r.__class__(**{**r.__dict__, "gen_s": None}) for r in rep.ctx.rows]
    assert step_budget(untimed) is None


def _bf16_like(gain: float, gen: dict[int, float]):
    """The 4B run as its BF16-rollout twin would log it: generation ``gain`` slower, the step longer by as much."""
    slower = runs.set_metric("timing_s/gen", lambda s, v: v * (1 + gain))
    longer = runs.set_metric("timing_s/step", lambda s, v: v + gen[s] * gain)
    return lambda lines: longer(slower(lines))


def test_a_baseline_that_differs_only_in_generation_measures_the_saving_the_plan_predicts(tmp_path):
    gen = {r.step: r.gen_s for r in _rows(tmp_path).ctx.rows}
    (tmp_path / "baseline").mkdir()
    base = runs.log_copy(tmp_path / "baseline", "real-4b", _bf16_like(0.39, gen))
    rep = make_report(runs.log_copy(tmp_path, "real-4b"), spec=SPEC_4B, baseline=base)
    b = step_budget(rep.ctx.rows, (0.39, 0.39), rep.ctx.baseline)
    # the baseline's longer step, seen from the FP8 run, is exactly the saving predicted from the FP8 run's share
    assert 1 - 1 / (1 + b.baseline_step_speed_up) == pytest.approx(b.expected_saving[0], rel=1e-3)
    assert b.baseline_gen_share > b.shares["generation"]
    text = render_text(rep)
    assert "measured: the baseline's step takes +3." in text, text


def test_the_text_and_json_carry_the_step_line(tmp_path):
    rep = _rows(tmp_path, spec=SPEC_4B)
    text = render_text(rep)
    line = next(ln for ln in text.splitlines() if ln.startswith("  step: "))
    assert line.startswith(
        "  step: generation 9% of the step (steps 2-3, mean 104.7 s); old log-prob 21%, update 69%"
    )
    assert "the expected +39% to +44% rollout gain saves 3.3%-3.7% of a BF16-rollout step" in line
    step = json.loads(render_json(rep, []))["comparison"]["step"]
    assert step["steps"] == [2, 3]
    assert step["expected_saving"] == [pytest.approx(0.033, abs=0.001), pytest.approx(0.037, abs=0.001)]
    assert sum(step["shares"].values()) == pytest.approx(1.0, abs=0.01)


def test_without_a_plan_the_step_line_gives_the_split_only(tmp_path):
    text = render_text(_rows(tmp_path, "sglang"))
    line = next(ln for ln in text.splitlines() if ln.startswith("  step: "))
    assert "steps 2-5" in line and "rollout gain" not in line


def _window_pair(tmp, damage=None):
    """The FP8 W8A8 + FP8 KV window run against its BF16 twin (same base spec, same window)."""
    (tmp / "baseline").mkdir(parents=True)
    base = runs.log_copy(tmp / "baseline", "window-bf16")
    return make_report(runs.log_copy(tmp, "window-fp8kv", damage), spec=WINDOW_SPEC["window-fp8kv"], baseline=base)


def test_the_window_pair_puts_its_step_difference_in_the_trainer_not_the_rollout(tmp_path):
    rep = _window_pair(tmp_path)
    step = json.loads(render_json(rep, []))["comparison"]["step"]
    assert step["steps"] == step["baseline_steps"] == [2, 3]
    ph = step["baseline_phases"]
    assert ph["step"] == [pytest.approx(145.7, abs=0.05), pytest.approx(133.67, abs=0.05)]
    assert ph["generation"] == [pytest.approx(22.128, abs=0.01), pytest.approx(22.076, abs=0.01)]
    # the phases add up to the step on both sides
    assert sum(b for k, (_, b) in ph.items() if k != "step") == pytest.approx(ph["step"][1], abs=0.01)
    assert sum(a for k, (a, _) in ph.items() if k != "step") == pytest.approx(ph["step"][0], abs=0.01)
    assert abs(step["rollout_part_s"]) < 0.2 and step["trainer_fp8"] is False
    line = next(ln for ln in render_text(rep).splitlines() if ln.startswith("  against the baseline"))
    assert "step 145.7 -> 133.7 s (-8.3%)" in line
    assert "the phases FP8 in the rollout changes: -0.11 s (-0.1%)" in line
    assert "the other -11.91 s is in phases this spec's BF16 trainer runs alike in both runs" in line


def test_an_fp8_trainer_owns_its_trainer_phases(tmp_path):
    rep = _window_pair(tmp_path)
    rep.ctx.plan = dataclasses.replace(rep.ctx.plan, trainer_fp8=True)
    line = next(ln for ln in render_text(rep).splitlines() if ln.startswith("  against the baseline"))
    assert "includes the FP8 trainer's" in line and "run-to-run variation" not in line


def test_step_1_does_not_count_in_the_generation_comparison(tmp_path):
    """Step 1 compiles the engine's first-use kernels: a step 1 ten times slower changes neither the generation
    mean nor RPT032's verdict."""
    slow_first = runs.set_metric("timing_per_token_ms/gen", lambda s, v: v * 10 if s == 1 else v)
    plain, slowed = (
        json.loads(render_json(_window_pair(tmp_path / name, damage), []))["comparison"]
        for name, damage in (("a", None), ("b", slow_first))
    )
    assert plain["generation_tokens_per_s"] == slowed["generation_tokens_per_s"]
    assert plain["generation_tokens_per_s"]["steps"] == [2, 3]
    assert plain["generation_tokens_per_s"]["speed_up"] == pytest.approx(0.006, abs=0.001)


def test_rpt032_says_when_the_bf16_engine_held_the_whole_step(tmp_path):
    rep = _window_pair(tmp_path)
    (found,) = [f for f in rep.findings if f.code == "RPT032"]
    assert found.message.endswith("; the plan's BF16 engine holds all 128 sequences, where FP8 measured +0.6%")
    assert "+1%, below the +39%" in found.message
