"""The report's step line: where a real run's step time goes and what the rollout's FP8 gain can save in it."""

from __future__ import annotations

import json

import pytest

from fp8spec.report.build import make_report
from fp8spec.report.phases import OTHER, PHASES, saving, split, step_budget
from fp8spec.report.render import render_json, render_text
from tests.report import runs
from tests.report.runs import SPEC_4B


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
