"""plot_variants: one bar per variant, each the run's mean step over steps 2 on, on the two real 4B window runs."""

from __future__ import annotations

import re
import statistics

from benchmarks.rl_real.plot_variants import main
from tests.report.runs import DATA, LOGS


def _metric(topic: str, key: str) -> list[float]:
    text = (DATA / LOGS[topic]).read_text(encoding="utf-8")
    return [float(v) for v in re.findall(rf"{re.escape(key)}:([0-9.]+)", text)]


def test_each_variant_is_one_bar_of_its_mean_step(tmp_path, capsys):
    out = tmp_path / "variants.svg"
    args = [f"BF16={DATA / LOGS['window-bf16']}", f"FP8 KV={DATA / LOGS['window-fp8kv']}"]
    assert main([str(out), *args]) == 0
    svg = out.read_text(encoding="utf-8")
    for label, topic in (("BF16", "window-bf16"), ("FP8 KV", "window-fp8kv")):
        step = statistics.mean(_metric(topic, "timing_s/step")[1:])  # steps 2 on, from the log itself
        gen = statistics.mean(_metric(topic, "timing_s/gen")[1:])
        assert f">{label} ({step:.1f} s)</text>" in svg
        assert f"<title>{label}, mean step generation: {gen:.3g} s</title>" in svg
    assert svg.count("mean step update:") == 2
    assert main([str(out), *args]) == 0 and out.read_text(encoding="utf-8") == svg  # same runs, same bytes


def test_bad_arguments_and_unreadable_runs_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "variants.svg"
    assert main([str(out)]) == 2
    assert main([str(out), "no-label-here"]) == 2
    assert main([str(out), f"x={tmp_path / 'missing.log'}"]) == 2
    err = capsys.readouterr().err
    assert "plot_variants: " in err and "Traceback" not in err
    assert not out.exists()
