"""What the real-size RL runs showed, read back from their folders (``BUNDLE/BUNDLE.log``,
``bare-BUNDLE/replica*.json``) or archives of them.

    python -m benchmarks.rl_real.summarize_real rl-real-4b-h200-fp8kv.tgz bare-real-4b-h200-fp8kv.tgz ... \
        [--json out.json]

Per bundle: one row per training step from verl's console metrics (rl_run/summarize.py parses them): generation
time and tokens/s (verl's timing_per_token_ms/gen: the step's response tokens over timing_s/gen), old log-prob,
update, weight sync, step, mean response length, preempted requests where verl logs them, mismatch KL and the
other rollout_corr/* figures, the trainer's torch peak; then the engine's own KV figures (its INFO log lines),
the peak GPU memory of trainer and engine processes (nvidia-smi, sampled each second), the bare engine's
tokens/s on the same step's prompts and the loop-to-bare ratio (the aim: within 5 %), whether the bare engine
got the arguments verl gave the loop's engine (from the `vllm serve` argument list verl prints), and the
planner's predictions (plan_predictions.json) next to what was measured.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.engine.engine_common import parse_log as engine_facts
from benchmarks.rl_run.summarize import ANSI, parse_log

HERE = Path(__file__).resolve().parent

PREDICTIONS = HERE / "plan_predictions.json"
PREFIX = re.compile(r"^\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\) ")
COLUMNS = (  # (metric, header); "gen tok/s" and the ratio are computed
    ("timing_s/gen", "gen s"), ("gen_tok_s", "gen tok/s"), ("timing_s/old_log_prob", "old log-prob s"),
    ("timing_s/update_actor", "update s"), ("timing_s/update_weights", "weight sync s"), ("timing_s/step", "step s"),
    ("response_length/mean", "resp len"), ("timing_s/agent_loop/num_preempted/mean", "preempted/req"),
    ("rollout_corr/kl", "mismatch KL"), ("rollout_corr/k3_kl", "k3 KL"),
    ("training/rollout_actor_probs_pearson_corr", "prob corr"), ("rollout_corr/rollout_is_mean", "IS mean"),
    ("rollout_corr/rollout_is_min", "IS min"), ("rollout_corr/rollout_is_max", "IS max"),
    ("rollout_corr/rollout_is_ratio_fraction_high", "IS >C"), ("rollout_corr/rollout_is_ratio_fraction_low", "IS <1/C"),
    ("actor/perf/max_memory_allocated_gb", "trainer alloc GiB"), ("actor/perf/max_memory_reserved_gb", "trainer rsv GiB"),
)


def serve_args(text: str) -> list[str] | None:
    """The first `vllm serve` argument list verl's server prints (vllm_async_server.py), or None."""
    lines = [PREFIX.sub("", ANSI.sub("", raw)) for raw in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("['serve',"):
            for j in range(i, min(i + 400, len(lines))):
                if lines[j].rstrip().endswith("]"):
                    return list(ast.literal_eval("\n".join(lines[i: j + 1])))
    return None


def args_mismatches(kwargs: dict, args: list[str]) -> list[str]:
    """Where vllm.LLM kwargs (bundle_engine.engine_kwargs) differ from a `vllm serve` argument list."""
    given: dict[str, Any] = {}
    i = 2  # 'serve', the model path
    while i < len(args):
        key = args[i][2:]
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            given[key], i = args[i + 1], i + 2
        else:
            given[key], i = True, i + 1
    out = []
    for key, value in kwargs.items():
        if key == "model":
            continue
        have = given.pop(key, None)
        if value is True or value is False or value is None:
            ok = have is (True if value is True else None)
        elif isinstance(value, (dict, list)):
            ok = have is not None and json.loads(have) == value
        else:
            ok = have == str(value)
        if not ok:
            out.append(f"{key}: bare {value!r}, loop {have!r}")
    out += [f"{key}: bare (unset), loop {have!r}" for key, have in given.items()]
    return out


def gpu_peaks(folder: Path) -> dict:
    """Peak GPU memory (MiB) of the trainer's and the engine's processes, and of each GPU in all."""
    peaks: dict[str, Any] = {"total_mib": {}, "trainer_mib": None, "engine_mib": None}
    total = folder / "gpu-total.csv"
    if total.exists():
        for row in csv.reader(total.open(encoding="utf-8")):
            if len(row) in (4, 5):  # ts, index, uuid, MiB used[, % of time a kernel ran]
                gpu, used = row[1].strip(), int(row[3])
                peaks["total_mib"][gpu] = max(peaks["total_mib"].get(gpu, 0), used)
    roles = {}
    pids = folder / "gpu-pids.txt"
    if pids.exists():
        for line in pids.read_text(encoding="utf-8", errors="replace").splitlines():
            pid, _, cmd = line.partition(" ")
            roles[pid] = "engine" if re.search(r"vllm|VLLM", cmd) else "trainer" if "WorkerDict" in cmd else "other"
    apps = folder / "gpu-apps.csv"
    if apps.exists():
        per_sample: dict[tuple[str, str, str], int] = {}
        for row in csv.reader(apps.open(encoding="utf-8")):
            if len(row) == 4 and row[3].strip().isdigit():
                key = (row[0], row[1].strip(), roles.get(row[2].strip(), "other"))
                per_sample[key] = per_sample.get(key, 0) + int(row[3])
        for (_, _, role), used in per_sample.items():
            if role in ("trainer", "engine"):
                peaks[f"{role}_mib"] = max(peaks[f"{role}_mib"] or 0, used)
        peaks["trainer_beside_engine_mib"] = _beside_engine(per_sample, peaks["engine_mib"])
        peaks["engine_at_trainer_peak_mib"] = _engine_at_trainer_peak(per_sample, peaks["trainer_mib"])
    return peaks


def _engine_at_trainer_peak(per_sample: dict[tuple[str, str, str], int], trainer_peak: int | None) -> int | None:
    """What the (sleeping) engine held in the sample of the trainer's peak: with the trainer's peak, what the GPU
    held at the training peak (memory_estimates.yaml trainer.packing_free_share)."""
    at = {(ts, gpu) for (ts, gpu, role), used in per_sample.items() if role == "trainer" and used == trainer_peak}
    held = [used for (ts, gpu, role), used in per_sample.items() if role == "engine" and (ts, gpu) in at]
    return max(held, default=None)


def _beside_engine(per_sample: dict[tuple[str, str, str], int], engine_peak: int | None) -> int | None:
    """The trainer's most memory in a sample where the engine is awake (within 3 % of its peak): what the
    trainer keeps beside the generating engine (fp8spec plan's 'kept during rollout')."""
    if not engine_peak:
        return None
    awake = {(ts, gpu) for (ts, gpu, role), used in per_sample.items() if role == "engine" and used >= 0.97 * engine_peak}
    kept = [used for (ts, gpu, role), used in per_sample.items() if role == "trainer" and (ts, gpu) in awake]
    return max(kept, default=None)


# vLLM's own lines around each generation: the KV cache wakes for it and the engine sleeps after it
# ("It took 0.13 seconds to wake up tags ['kv_cache']", "It took 0.05 seconds to fall asleep"), stamped MM-DD HH:MM:SS
VLLM_STAMP = r"INFO (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[[^\]]*\] It took [0-9.]+ seconds to "
WAKE_KV = re.compile(VLLM_STAMP + r"wake up tags \['kv_cache'\]")
ASLEEP = re.compile(VLLM_STAMP + r"fall asleep")


def generation_windows(text: str, year: int) -> list[tuple[float, float]]:
    """(start, end) epoch seconds of each generation: from the KV cache's wake-up to the next sleep (the engine's
    clock is the machine's, UTC on the GPU machine; one-second resolution)."""
    import datetime as dt

    def at(m: re.Match) -> float:
        mon, day, hh, mm, ss = (int(g) for g in m.groups())
        return dt.datetime(year, mon, day, hh, mm, ss, tzinfo=dt.timezone.utc).timestamp()

    events = sorted([(m.start(), "wake", at(m)) for m in WAKE_KV.finditer(text)]
                    + [(m.start(), "sleep", at(m)) for m in ASLEEP.finditer(text)])
    out, start = [], None
    for _, kind, t in events:
        if kind == "wake":
            start = t
        elif start is not None:
            out.append((start, t))
            start = None
    return out


def busy_during(folder: Path, windows: list[tuple[float, float]]) -> list[float | None]:
    """Mean of nvidia-smi's utilization.gpu (% of the sample period a kernel ran) over the samples inside each
    window: near 100 the GPU never waited on the host; well below, the host held the steps back."""
    total = folder / "gpu-total.csv"
    samples = []
    if total.exists():
        for row in csv.reader(total.open(encoding="utf-8")):
            if len(row) == 5 and row[4].strip().isdigit():
                samples.append((float(row[0]), int(row[4])))
    out: list[float | None] = []
    for a, b in windows:
        inside = [u for t, u in samples if a + 1 <= t <= b - 1]  # the stamps are whole seconds: drop the edges
        out.append(sum(inside) / len(inside) if inside else None)
    return out


def cpu_during(folder: Path, windows: list[tuple[float, float]], top: int = 4) -> list[dict[str, float]]:
    """Each window's busiest processes by name (sample_cpu.py's cpu-procs.csv): CPU % over the window, the CPU
    seconds between each process's last sample before it and its last inside it. A process near 100 % holds
    the GPU back; processes of one name are summed (vLLM's workers, Ray's workers)."""
    path = folder / "cpu-procs.csv"
    rows = []
    if path.exists():
        for row in csv.reader(path.open(encoding="utf-8")):
            if len(row) == 4:
                rows.append((float(row[0]), int(row[1]), row[2], float(row[3])))
    out: list[dict[str, float]] = []
    for a, b in windows:
        before: dict[int, float] = {}  # each process's CPU seconds at its last sample up to the window's start
        first: dict[int, float] = {}  # ... at its first sample inside (a process started inside the window)
        last: dict[int, tuple[str, float]] = {}
        for t, pid, name, cpu in rows:
            if t <= a:
                before[pid] = cpu
            elif t <= b:
                first.setdefault(pid, cpu)
                last[pid] = (name, cpu)
        by_name: dict[str, float] = {}
        for pid, (name, cpu) in last.items():
            by_name[name] = by_name.get(name, 0.0) + cpu - before.get(pid, first[pid])
        busiest = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
        out.append({name: round(100 * used / (b - a), 1) for name, used in busiest if b > a})
    return out


def read(paths: list[Path]) -> dict:
    """{bundle: {"rl": {...}, "bare": [...]}} from rl-*/bare-* archives or folders."""
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        for path in paths:
            if path.is_dir():
                folders.append(path)
            else:
                with tarfile.open(path) as tar:
                    dest = Path(tmp) / path.name
                    tar.extractall(dest, filter="data")
                    folders += [p for p in dest.iterdir() if p.is_dir()]
        for folder in folders:
            if folder.name.startswith("bare-"):
                bundle = folder.name[len("bare-"):]
                reps = []
                for rec in sorted(folder.glob("replica*.json")):
                    r = json.loads(rec.read_text(encoding="utf-8"))
                    log = rec.with_suffix(".log")
                    r["engine"] = engine_facts(log.read_text(encoding="utf-8", errors="replace")) if log.exists() else {}
                    reps.append(r)
                runs.setdefault(bundle, {})["bare"] = reps
                continue
            bundle = folder.name
            log = folder / f"{bundle}.log"
            text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            run = parse_log(text)
            for metrics in run["steps"].values():
                if metrics.get("timing_per_token_ms/gen"):
                    metrics["gen_tok_s"] = 1000.0 / metrics["timing_per_token_ms/gen"]
            summary = (folder / "summary.txt").read_text(encoding="utf-8") if (folder / "summary.txt").exists() else ""
            rc = re.search(r"rc=(\S+) (\d+)s", summary)
            run.update(rc=rc.group(1) if rc else None, wall_s=int(rc.group(2)) if rc else None,
                       engine=engine_facts(ANSI.sub("", text)), serve_args=serve_args(text), gpu=gpu_peaks(folder))
            first = _first_sample(folder)
            windows = generation_windows(ANSI.sub("", text), first.year) if first else []
            run["generation_gpu_busy_pct"] = busy_during(folder, windows)
            run["generation_cpu_pct"] = cpu_during(folder, windows)
            runs.setdefault(bundle, {})["rl"] = run
    return runs


def _first_sample(folder: Path):
    """The first GPU sample's time (UTC), for the year the engine's stamps leave out."""
    import datetime as dt

    total = folder / "gpu-total.csv"
    if not total.exists():
        return None
    for row in csv.reader(total.open(encoding="utf-8")):
        if len(row) >= 4:
            return dt.datetime.fromtimestamp(float(row[0]), tz=dt.timezone.utc)
    return None


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def compare(bundle: str, entry: dict, predictions: dict) -> dict:
    """Loop against bare and plan against run: the figures the run is for."""
    rl, bare, pred = entry.get("rl"), entry.get("bare") or [], predictions.get(bundle, {})
    out: dict[str, Any] = {"bundle": bundle}
    steps = {s: m for s, m in (rl or {}).get("steps", {}).items() if s > 0}
    if steps:
        out["loop_gen_tok_s"] = {s: m.get("gen_tok_s") for s, m in sorted(steps.items())}
    if bare:
        out["bare_gen_tok_s"] = sum(r["output_tok_per_s"] for r in bare)  # replicas run side by side
        out["bare_response_length_mean"] = bare[0]["response_length_mean"]
        out["bare_preemptions"] = [r.get("preemptions") for r in bare]
        out["bare_kv_cache_tokens"] = bare[0]["engine"].get("kv_cache_tokens")
        if steps and steps.get(1, {}).get("gen_tok_s"):
            out["loop_over_bare_step1"] = steps[1]["gen_tok_s"] / out["bare_gen_tok_s"]
            later = [m["gen_tok_s"] for s, m in steps.items() if s > 1 and m.get("gen_tok_s")]
            if later:
                out["loop_over_bare_steps2plus"] = sum(later) / len(later) / out["bare_gen_tok_s"]
        if rl and rl.get("serve_args"):
            out["args_mismatches"] = args_mismatches(bare[0]["engine_kwargs"], rl["serve_args"])
    if rl:
        out["loop_kv_cache_tokens"] = rl["engine"].get("kv_cache_tokens")
        out["gpu_peak_mib"] = rl["gpu"]
        out["trainer_torch_peak_reserved_gib"] = max(
            (m.get("actor/perf/max_memory_reserved_gb") or 0 for m in steps.values()), default=None)
        out["preempted_per_request"] = [m.get("timing_s/agent_loop/num_preempted/mean") for m in steps.values()]
        if any(v is not None for v in rl.get("generation_gpu_busy_pct") or []):
            out["generation_gpu_busy_pct"] = rl["generation_gpu_busy_pct"]
        if any(rl.get("generation_cpu_pct") or []):
            out["generation_cpu_pct"] = rl["generation_cpu_pct"]
    if pred:
        out["plan"] = {k: pred[k] for k in ("kv_cache_tokens", "trainer_peak_gib", "preempts")}
        kv = out.get("loop_kv_cache_tokens") or out.get("bare_kv_cache_tokens")
        if kv:
            out["plan_kv_error"] = pred["kv_cache_tokens"] / kv - 1
        if out.get("trainer_torch_peak_reserved_gib"):
            out["plan_trainer_peak_error"] = pred["trainer_peak_gib"] / out["trainer_torch_peak_reserved_gib"] - 1
    return out


def markdown(runs: dict, predictions: dict) -> str:
    lines = []
    for bundle, entry in sorted(runs.items()):
        rl = entry.get("rl")
        c = compare(bundle, entry, predictions)
        ended = f"rc {rl['rc']}, {rl['wall_s']} s" if rl and rl["rc"] is not None else "no loop run" if not rl else "did not end"
        lines.append(f"### {bundle} ({ended})\n")
        if rl and any(s > 0 for s in rl["steps"]):
            lines.append("| step | " + " | ".join(h for _, h in COLUMNS) + " |")
            lines.append("|---" * (len(COLUMNS) + 1) + "|")
            for s, m in sorted(rl["steps"].items()):
                if s > 0:
                    lines.append(f"| {s} | " + " | ".join(_cell(m.get(k)) for k, _ in COLUMNS) + " |")
            lines.append("")
        facts = [f"{k} {_cell(v)}" for k, v in c.items() if k not in ("bundle", "loop_gen_tok_s")]
        lines += [f"- {f}" for f in facts]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="rl-*.tgz / bare-*.tgz from run_h200_real.sh, or folders")
    ap.add_argument("--json", type=Path, help="also write everything parsed and compared here")
    a = ap.parse_args(argv)
    missing = [str(p) for p in a.paths if not p.exists()]
    if missing:
        print(f"summarize_real: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    runs = read(a.paths)
    if not runs:
        print("summarize_real: no rl-* or bare-* run in the given paths", file=sys.stderr)
        return 2
    predictions = json.loads(PREDICTIONS.read_text(encoding="utf-8"))["specs"]
    print(markdown(runs, predictions))
    if a.json:
        data = {b: {**e, "compare": compare(b, e, predictions)} for b, e in runs.items()}
        a.json.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
