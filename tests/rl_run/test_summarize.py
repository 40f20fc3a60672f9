"""benchmarks/rl_run/summarize.py reads the real logs of the fourth H200 attempt (committed) back correctly."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks/rl_run/summarize.py"
SHORT_TOKENIZER_RUN = REPO / "tests/data/rl_run/fp8_bf16_3steps_short_tokenizer_rl.tgz"


def _module():
    return importlib.import_module("benchmarks.rl_run.summarize")


def test_attempt4_read_back():
    runs = _module().read_runs(SHORT_TOKENIZER_RUN)
    fp8, bf16 = runs["tiny-qwen3-h200-fp8"], runs["tiny-qwen3-h200-bf16"]
    assert fp8["rc"] == bf16["rc"] == "0"
    for run in (fp8, bf16):
        assert sorted(run["steps"]) == [0, 1, 2, 3]
        assert "global_step_3/actor:" in run["checkpoint"]
        for step in (1, 2, 3):
            m = run["steps"][step]
            assert all(math.isfinite(m[k]) for k in m if k.startswith("rollout_corr/"))
            # that run's tokenizer had 535 tokens, the model 4096 logits; verl's rollout masks the tail, the
            # trainer does not: the mismatch KL is log(4096/535) whatever the precision (make_assets.py)
            assert abs(m["rollout_corr/kl"] - math.log(4096 / 535)) < 0.01
            assert m["actor/grad_norm"] == 0.0 and m["critic/score/mean"] == 0.0  # GSM8K rule alone: no signal
    # the FP8 engine: one receive per sync (init + 3 steps), all on the list path; scales after each step
    assert len(fp8["syncs"]) == 4 and all(s["flat_launches"] == 0 for s in fp8["syncs"])
    assert fp8["syncs"][-1]["stats"]["list_path"] == 4
    assert len(fp8["kv_scales"]) == 3 and all(a["scales"] == 12 and a["layers"] == 4 for a in fp8["kv_scales"])
    assert fp8["kv_scales"][1]["k"] == [0.023125, 0.0273438]
    assert bf16["syncs"] == [] and bf16["kv_scales"] == []
    # BF16 rollout follows the trainer more closely than FP8 (probability correlation)
    corr = "training/rollout_actor_probs_pearson_corr"
    assert all(bf16["steps"][s][corr] > 0.999 > 0.99 > fp8["steps"][s][corr] > 0.98 for s in (1, 2, 3))


def test_cli_table_and_errors(tmp_path):
    out = tmp_path / "runs.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.rl_run.summarize", str(SHORT_TOKENIZER_RUN), "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "### tiny-qwen3-h200-fp8 (rc 0, 344 s)" in proc.stdout and "checkpoint: global_step_3" in proc.stdout
    assert out.read_text().startswith("{")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.rl_run.summarize", str(tmp_path / "missing.tgz")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("summarize: ") and "Traceback" not in proc.stderr


FP8_BF16_RUN = REPO / "tests/data/rl_run/fp8_bf16_5steps_rl.tgz"
FP8_REPEAT_RUN = REPO / "tests/data/rl_run/fp8_5steps_repeat_rl.tgz"


def test_attempt5_is_what_benchmarks_md_reports():
    """The figures docs/results.md#rl-runs quotes, read back from the committed logs of the 5-step FP8 and BF16 runs."""
    runs = _module().read_runs(FP8_BF16_RUN)
    fp8, bf16 = runs["tiny-qwen3-h200-fp8"], runs["tiny-qwen3-h200-bf16"]
    assert fp8["rc"] == bf16["rc"] == "0"
    for run in (fp8, bf16):
        assert sorted(run["steps"]) == [0, 1, 2, 3, 4, 5] and "global_step_5/actor:" in run["checkpoint"]
        assert all(run["steps"][s]["actor/grad_norm"] > 0.5 for s in range(1, 6))  # the policy moves
        assert run["steps"][5]["critic/score/mean"] > run["steps"][1]["critic/score/mean"] > 0.19
    kl = "rollout_corr/kl"
    assert all(fp8["steps"][s][kl] > 10 * abs(bf16["steps"][s][kl]) for s in range(1, 6))
    assert fp8["steps"][1][kl] > fp8["steps"][5][kl] > 0.001  # 0.0068 -> 0.0011
    assert all(abs(bf16["steps"][s][kl]) < 1e-4 for s in range(1, 6))
    # one sync at init and one after each step, each one flat launch (float32 buckets, cast once)
    assert len(fp8["syncs"]) == 6 and all(s["flat_launches"] == 1 for s in fp8["syncs"])
    assert fp8["syncs"][-1]["stats"] == {"flat_launches": 6, "plan_builds": 2, "cache_hits": 4, "not_flat": 0,
                                         "list_path": 0, "spec_discarded": 0}
    assert max(s["receive_s"] for s in fp8["syncs"][1:]) < 0.02
    # new q/k/v scales after every step, from the trainer's forward passes
    assert len(fp8["kv_scales"]) == 5 and len({str(a) for a in fp8["kv_scales"]}) == 5


def test_attempt6_repeats_the_fp8_run_and_reports_the_cut_bf16_run():
    runs = _module().read_runs(FP8_REPEAT_RUN)
    fp8, bf16 = runs["tiny-qwen3-h200-fp8"], runs["tiny-qwen3-h200-bf16"]
    assert fp8["rc"] == "0" and sorted(fp8["steps"]) == [0, 1, 2, 3, 4, 5]
    assert 0.001 < fp8["steps"][5]["rollout_corr/kl"] < fp8["steps"][1]["rollout_corr/kl"] < 0.01
    assert bf16["rc"] is None and not bf16["steps"]
    assert "### tiny-qwen3-h200-bf16 (did not end: no summary line)\n\nno training step logged" in \
        _module().markdown(runs)


def test_te_report_counts_the_trainer_processes_that_reported(tmp_path):
    """A multi-GPU run's every trainer rank reports its TE calls; the table says how many processes did (Ray prefixes
    each worker's line with its pid in the driver's log, colours included)."""
    from benchmarks.rl_run.summarize import markdown, parse_log

    te = ("fp8spec te_report: {phase}: fwd FP8 1240/1240 TE module calls (TELinear x248); bwd FP8 1240 calls, "
          "BF16: router x4")
    lines = [f"\x1b[36m(WorkerDict pid={pid})\x1b[0m 2026-12-01 20:01:43,730 INFO fp8spec.runtime.te_report: "
             + te.format(phase=phase) for pid in (6131, 6132, 6131) for phase in ("old_log_prob", "update")]
    lines.append(te.format(phase="update"))  # a line without a worker prefix counts no process
    lines.append("step:1 - timing_s/step:10.0")
    parsed = parse_log("\n".join(lines))
    assert [r["pid"] for r in parsed["te_report"]] == [6131, 6131, 6132, 6132, 6131, 6131, None]
    run = dict(parsed, rc="0", wall_s=1, checkpoint="")
    assert "reported by 2 trainer process(es)" in markdown({"x4": run})


LAYOUT_RUNS = REPO / "benchmarks/results/2026-12-04_h200_moe-layout-rl"


def test_experts_bf16_layout_runs_read_back():
    """The per-module layout in verl's main_ppo (two lanes of run_h200_megatron.sh, one of run_h200_sglang.sh with
    RL_MEGATRON=1): every run trained 5 steps and saved step 5; TE ran the routed experts outside FP8 in the
    experts-BF16 bundles and inside it in the all-FP8 one, in both phases."""
    summarize = _module()
    vllm = summarize.read_runs(LAYOUT_RUNS / "rl_experts_bf16_vllm.tgz")
    sglang = summarize.read_runs(LAYOUT_RUNS / "rl_experts_bf16_sglang.tgz")
    runs = {"experts": vllm["experts"], "fp8": vllm["fp8"], "sglang": sglang["sglang"]}
    for name, run in runs.items():
        assert run["rc"] == "0", name
        assert [s for s in sorted(run["steps"]) if s > 0] == [1, 2, 3, 4, 5], name
        assert "global_step_5/actor:" in run["checkpoint"], name
        assert all(abs(run["steps"][s]["rollout_corr/kl"]) < 2e-3 for s in range(1, 6)), name
        phases = {r["phase"] for r in run["te_report"]}
        assert phases == {"old_log_prob", "update"}, name
        for report in run["te_report"]:
            experts_bf16 = re.search(r"experts 0/\d+", report["line"]) is not None
            assert experts_bf16 == (name != "fp8"), (name, report["line"][:200])
            assert report["fwd_fp8"] < report["fwd_te"] if name != "fp8" else report["fwd_fp8"] == report["fwd_te"]
    # the experts-BF16 lane's engine re-quantized the weights at every sync (init + 5 steps), FP8 KV scales each step
    assert len(runs["experts"]["syncs"]) == 6 and len(runs["experts"]["kv_scales"]) == 5
    # a lane listing (checkpoints.txt) names every lane's folder: each run gets its own bundle's lines only
    assert "megatron-fp8/" not in runs["experts"]["checkpoint"]
