"""benchmarks/rl_real/summarize_real.py over logs in the formats the real run writes: verl's step lines and
`vllm serve` argument list (a real H200 log, docs/results.md#rl-runs, and a synthetic real-size run built in
the same format), vLLM's own INFO lines (as the H200 engine runs printed them), run_h200_real.sh's nvidia-smi
samples and bench_rollout.py --bundle's record."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO, require

require("hydra")
require("verl")
from benchmarks.rl_real import bundle_engine as be  # noqa: E402  (after the skips: it imports verl)
from benchmarks.rl_real import summarize_real as sr  # noqa: E402

SCRIPT = ["-m", "benchmarks.rl_real.summarize_real"]
FP8_BF16_RUN = REPO / "tests/data/rl_run/fp8_bf16_5steps_rl.tgz"
ESC = "\x1b"
TASK = f"{ESC}[36m(TaskRunnerV1 pid=3107){ESC}[0m "
SERVER = f"{ESC}[36m(vLLMHttpServer pid=6526){ESC}[0m "


def _compile(spec: Path, out: Path) -> Path:
    proc = run_cli_here("compile", str(spec), "-o", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    return out


def _kwargs(bundle: Path, model_config: Path, tmp: Path) -> dict:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    shutil.copy(model_config, model / "config.json")
    cfg = be.compose(bundle)
    cfg.actor_rollout_ref.model.path = str(model)
    return be.engine_kwargs(cfg)


def test_bare_engine_gets_the_args_verl_gave_the_engine_in_the_h200_run(tmp_path):
    """bundle_engine's kwargs for the tiny bundles equal the `vllm serve` arguments verl printed in the 5-step run."""
    with tarfile.open(FP8_BF16_RUN) as tar:
        tar.extractall(tmp_path, filter="data")
    for name, spec in (("tiny-qwen3-h200-fp8", "tiny-qwen3-h200.yaml"), ("tiny-qwen3-h200-bf16", "tiny-qwen3-h200-bf16.yaml")):
        bundle = _compile(REPO / "specs" / spec, tmp_path / "b") / name
        kw = _kwargs(bundle, REPO / "specs/models/tiny-qwen3/config.json", tmp_path)
        args = sr.serve_args((tmp_path / f"rl/{name}.log").read_text(encoding="utf-8", errors="replace"))
        assert args[:2] == ["serve", "/tmp/fp8spec-rl/model"]
        assert sr.args_mismatches(kw, args) == []
        # the check has teeth: one setting off, one missing, one extra
        assert sr.args_mismatches({**kw, "gpu_memory_utilization": 0.5}, args) == [
            "gpu_memory_utilization: bare 0.5, loop '0.4'"]
        assert sr.args_mismatches({**kw, "enforce_eager": True}, args) == ["enforce_eager: bare True, loop None"]
        assert sr.args_mismatches({k: v for k, v in kw.items() if k != "seed"}, args) == [
            "seed: bare (unset), loop '42'"]


def _serve_lines(kw: dict) -> list[str]:
    """verl's print of the serve argument list (pprint of the list it parses; format of the attempt-5 log)."""
    args = ["serve", kw["model"]]
    for k, v in kw.items():
        if k == "model" or v is None or v is False:
            continue
        args += [f"--{k}"] if v is True else [f"--{k}", json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
    body = ",\n ".join(repr(a) for a in args)
    return [SERVER + line for line in f"[{body}]".splitlines()]


def _step_line(step: int, gen_s: float, tokens: int, resp_mean: float) -> str:
    metrics = {"actor/perf/max_memory_allocated_gb": 70.5 + step, "actor/perf/max_memory_reserved_gb": 80.25,
               "rollout_corr/kl": 0.004 / step, "rollout_corr/k3_kl": 0.003, "rollout_corr/rollout_is_mean": 1.0,
               "rollout_corr/rollout_is_min": 0.6, "rollout_corr/rollout_is_max": 1.7,
               "rollout_corr/rollout_is_ratio_fraction_high": 0.0, "rollout_corr/rollout_is_ratio_fraction_low": 0.0,
               "training/rollout_actor_probs_pearson_corr": 0.99, "response_length/mean": resp_mean,
               "timing_s/gen": gen_s, "timing_s/old_log_prob": 20.5, "timing_s/update_actor": 60.25,
               "timing_s/update_weights": 3.5, "timing_s/step": gen_s + 90,
               "timing_per_token_ms/gen": gen_s * 1000 / tokens}
    return TASK + f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in metrics.items())


@pytest.fixture
def synthetic(tmp_path, bundles):
    """rl-real-4b-h200-fp8kv.tgz and bare-real-4b-h200-fp8kv.tgz as run_h200_real.sh packs them."""
    name = "real-4b-h200-fp8kv"
    kw = _kwargs(bundles / name, REPO / "benchmarks/rl_real/models/qwen3-4b/config.json", tmp_path)
    kw["model"] = "/tmp/fp8spec-real/model-4b"
    run = tmp_path / "root" / name
    run.mkdir(parents=True)
    engine = ["(EngineCore pid=7001) INFO 12-02 10:01:02 [v1/worker/gpu_model_runner.py:5255] Model loading took "
              "4.12 GiB memory and 8.1 seconds",
              "(EngineCore pid=7001) INFO 12-02 10:02:21 [v1/worker/gpu_worker.py:508] Available KV cache memory: 90.5 GiB",
              "(EngineCore pid=7001) INFO 12-02 10:02:21 [v1/core/kv_cache_utils.py:2146] GPU KV cache size: 1,318,000 tokens",
              "(EngineCore pid=7001) INFO 12-02 10:02:21 [v1/core/kv_cache_utils.py:2147] Maximum concurrency for "
              "40,960 tokens per request: 32.18x"]
    lines = [*_serve_lines(kw), *(SERVER + e for e in engine)]
    lines += [_step_line(s, gen, 256 * 4000, 4000.0) for s, gen in ((1, 100.0), (2, 98.0), (3, 99.0), (4, 97.0), (5, 96.0))]
    (run / f"{name}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run / "summary.txt").write_text(f"{name}: bundle={name} rc=0 1234s\n", encoding="utf-8")
    (run / "gpu-total.csv").write_text("1.0, 0, GPU-a, 1000\n2.0, 0, GPU-a, 99000\n3.0, 0, GPU-a, 87000\n")
    (run / "gpu-apps.csv").write_text("1.0, GPU-a, 11, 500\n2.0, GPU-a, 11, 600\n2.0, GPU-a, 12, 98000\n"
                                      "3.0, GPU-a, 11, 86000\n3.0, GPU-a, 12, 1200\n")
    (run / "gpu-pids.txt").write_text("11 ray::WorkerDict.actor_rollout_update_actor\n12 VLLM::Worker_TP0 \n")
    bare = tmp_path / "out" / f"bare-{name}"
    bare.mkdir(parents=True)
    (bare / "replica0.json").write_text(json.dumps({
        "bundle": name, "step": 1, "replica": 0, "replicas": 1, "sequences": 256, "output_tokens": 1040000,
        "generate_s": 100.0, "output_tok_per_s": 10400.0, "response_length_mean": 4062.5, "preemptions": 0,
        "engine_kwargs": kw}), encoding="utf-8")
    (bare / "replica0.log").write_text("\n".join(engine) + "\n", encoding="utf-8")
    tars = []
    for folder, tgz in ((run, tmp_path / f"rl-{name}.tgz"), (bare, tmp_path / f"bare-{name}.tgz")):
        with tarfile.open(tgz, "w:gz") as tar:
            tar.add(folder, arcname=folder.name)
        tars.append(tgz)
    return tars


def test_synthetic_real_size_run(synthetic, tmp_path):
    out = tmp_path / "s.json"
    proc = subprocess.run([sys.executable, *SCRIPT, *map(str, synthetic), "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "### real-4b-h200-fp8kv (rc 0, 1234 s)" in proc.stdout and "| step | gen s | gen tok/s |" in proc.stdout
    c = json.loads(out.read_text())["real-4b-h200-fp8kv"]["compare"]
    assert c["loop_gen_tok_s"]["1"] == pytest.approx(256 * 4000 / 100.0)
    assert c["bare_gen_tok_s"] == 10400.0
    assert c["loop_over_bare_step1"] == pytest.approx(10240 / 10400)
    assert c["loop_over_bare_steps2plus"] == pytest.approx(sum(1024000 / g for g in (98, 99, 97, 96)) / 4 / 10400)
    assert c["args_mismatches"] == []
    assert c["loop_kv_cache_tokens"] == c["bare_kv_cache_tokens"] == 1318000
    # beside the awake engine (second 2) the trainer held 600 MiB; its 86,000 came when the engine slept
    # and at its own peak (second 3) the sleeping engine held 1,200
    assert c["gpu_peak_mib"] == {"total_mib": {"0": 99000}, "trainer_mib": 86000, "engine_mib": 98000,
                                 "trainer_beside_engine_mib": 600, "engine_at_trainer_peak_mib": 1200}
    assert c["trainer_torch_peak_reserved_gib"] == 80.25
    plan = json.loads((REPO / "benchmarks/rl_real/plan_predictions.json").read_text())["specs"]["real-4b-h200-fp8kv"]
    assert c["plan_kv_error"] == pytest.approx(plan["kv_cache_tokens"] / 1318000 - 1)
    assert c["plan_trainer_peak_error"] == pytest.approx(plan["trainer_peak_gib"] / 80.25 - 1)


def test_errors_are_one_line(tmp_path):
    proc = subprocess.run([sys.executable, *SCRIPT, str(tmp_path / "none.tgz")], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("summarize_real: ") and "Traceback" not in proc.stderr


def test_gpu_busy_during_each_generation(tmp_path):
    """Each generation runs from the KV cache's wake-up to the engine's next sleep (vLLM's own lines, as the H200
    runs print them); the kernel-busy samples inside it are averaged, the whole-second edges left out."""
    import datetime as dt

    def stamp(t: float) -> str:
        return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%m-%d %H:%M:%S")

    t0 = dt.datetime(2026, 12, 4, 14, 57, 9, tzinfo=dt.timezone.utc).timestamp()
    core = SERVER + "(EngineCore pid=5764) INFO "
    lines = [
        f"{core}{stamp(t0 - 60)} [abstract.py:327] It took 0.064282 seconds to fall asleep.",  # start-up: no window
        f"{core}{stamp(t0)} [abstract.py:345] It took 0.030249 seconds to wake up tags ['weights'].",
        f"{core}{stamp(t0)} [abstract.py:345] It took 0.115112 seconds to wake up tags ['kv_cache'].",
        f"{core}{stamp(t0 + 22)} [abstract.py:327] It took 0.083699 seconds to fall asleep.",
        f"{core}{stamp(t0 + 120)} [abstract.py:345] It took 0.125131 seconds to wake up tags ['kv_cache'].",
        f"{core}{stamp(t0 + 130)} [abstract.py:327] It took 0.085490 seconds to fall asleep.",
    ]
    run = tmp_path / "real-4b-h200-bf16"
    run.mkdir()
    (run / "real-4b-h200-bf16.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    busy = {t0 + k: 97 for k in range(23)} | {t0 + 120 + k: 60 for k in range(11)} | {t0 + 50: 3}
    busy |= {t0: 0, t0 + 22: 0, t0 + 120: 0, t0 + 130: 0}  # the edges: the wake-up and sleep seconds themselves
    (run / "gpu-total.csv").write_text(
        "".join(f"{t + 0.4}, 0, GPU-a, 1000, {u}\n" for t, u in sorted(busy.items())), encoding="utf-8")
    rl = sr.read([run])["real-4b-h200-bf16"]["rl"]
    assert rl["generation_gpu_busy_pct"] == [97, 60]
    assert rl["gpu"]["total_mib"] == {"0": 1000}  # the five-column samples still give the memory peak
    assert sr.compare("real-4b-h200-bf16", {"rl": rl}, {})["generation_gpu_busy_pct"] == [97, 60]
