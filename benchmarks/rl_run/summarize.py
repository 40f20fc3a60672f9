"""What the one-H200 RL run showed, read from its logs (run_h200_rl.sh's rl.tgz, or the folder it unpacks to).

    python -m benchmarks.rl_run.summarize out/rl [--json out.json]    # a folder of run logs, or a .tgz of one

Prints, per run (FP8, BF16), one row per training step: verl's own metrics from its console logger (step time
split, rollout_corr/*, the policy's movement) and the patch set's own log lines (which quantizer re-quantized
the weights at each sync and how long the receive took; the q/k/v scales the engine applied), then the
checkpoint listing. Nothing here is computed from the run but read back from it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

RUNS = ("tiny-qwen3-h200-fp8", "tiny-qwen3-h200-bf16")  # run_h200_rl.sh; megatron runs are found by their logs
NOT_RUNS = ("assets.log", "driver.log")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"\bstep:(\d+) - (.*)$")
METRIC = re.compile(r"^([\w/@.-]+):(?:np\.\w+\()?(-?[\d.eE+-]+|nan|inf)\)?$")
SYNC = re.compile(r"fp8spec fast_block_quant: weight sync received in ([\d.]+) s, (\d+) flat-bucket launches, "
                  r"stats (\{.*\})")
# Ray's prefix on a worker's line in the driver's log: each trainer rank is one worker process
WORKER = re.compile(r"^\((\w+) pid=(\d+)")
TE = re.compile(r"fp8spec te_report: (old_log_prob|update): fwd FP8 (\d+)/(\d+) TE module calls .*?; "
                r"bwd FP8 (\d+) calls.*$")
KV = re.compile(r"fp8spec kv_scales: applied (\d+) q/k/v scales to (\d+) attention layers "
                r"\(k \[([\d.e-]+), ([\d.e-]+)\] q \[([\d.e-]+), ([\d.e-]+)\] v \[([\d.e-]+), ([\d.e-]+)\]\)")
# the columns of the step table: (metric, header)
COLUMNS = (
    ("timing_s/gen", "gen s"),
    ("timing_s/old_log_prob", "log-prob s"),
    ("timing_s/update_actor", "update s"),
    ("timing_s/update_weights", "weight sync s"),
    ("timing_s/step", "step s"),
    ("rollout_corr/kl", "mismatch KL"),
    ("rollout_corr/k3_kl", "k3 KL"),
    ("training/rollout_actor_probs_pearson_corr", "prob corr"),
    ("rollout_corr/rollout_is_mean", "IS mean"),
    ("rollout_corr/rollout_is_min", "IS min"),
    ("rollout_corr/rollout_is_max", "IS max"),
    ("rollout_corr/rollout_is_ratio_fraction_high", "IS >C"),
    ("rollout_corr/rollout_is_ratio_fraction_low", "IS <1/C"),
    ("critic/score/mean", "reward"),
    ("actor/grad_norm", "grad norm"),
    ("response_length/mean", "resp len"),
)


def parse_log(text: str) -> dict:
    """Steps (verl's metrics by step), weight syncs and KV-scale applications, in log order."""
    steps: dict[int, dict[str, float]] = {}
    syncs, kv, te = [], [], []
    for raw in text.splitlines():
        line = ANSI.sub("", raw)
        m = STEP.search(line)
        if m:
            metrics = {}
            for part in m.group(2).split(" - "):
                mm = METRIC.match(part.strip())
                if mm:
                    metrics[mm.group(1)] = float(mm.group(2))
            steps.setdefault(int(m.group(1)), {}).update(metrics)
            continue
        m = SYNC.search(line)
        if m:
            stats = json.loads(m.group(3).replace("'", '"'))
            syncs.append({"receive_s": float(m.group(1)), "flat_launches": int(m.group(2)), "stats": stats})
            continue
        m = TE.search(line)
        if m:
            w = WORKER.match(line)
            te.append({"phase": m.group(1), "fwd_fp8": int(m.group(2)), "fwd_te": int(m.group(3)),
                       "bwd_fp8": int(m.group(4)), "line": m.group(0), "pid": int(w.group(2)) if w else None})
            continue
        m = KV.search(line)
        if m:
            k0, k1, q0, q1, v0, v1 = (float(x) for x in m.groups()[2:])
            kv.append({"scales": int(m.group(1)), "layers": int(m.group(2)), "k": [k0, k1], "q": [q0, q1],
                       "v": [v0, v1]})
    return {"steps": steps, "syncs": syncs, "kv_scales": kv, "te_report": te}


def read_run_dir(folder: Path) -> dict:
    out = {}
    summary = (folder / "summary.txt").read_text(encoding="utf-8") if (folder / "summary.txt").exists() else ""
    names = [n for n in RUNS if (folder / f"{n}.log").exists()] or sorted(
        p.stem for p in folder.glob("*.log") if p.name not in NOT_RUNS and not p.name.startswith("ray-head-")
    )
    for name in names:
        log = folder / f"{name}.log"
        run = parse_log(log.read_text(encoding="utf-8", errors="replace"))
        rc = re.search(rf"^{re.escape(name)}: (?:gpu|bundle)=\S+ rc=(\S+) (\d+)s$", summary, flags=re.MULTILINE)
        run["rc"], run["wall_s"] = (rc.group(1), int(rc.group(2))) if rc else (None, None)
        ckpt = folder / f"{name}.checkpoint.txt"
        run["checkpoint"] = ckpt.read_text(encoding="utf-8") if ckpt.exists() else _lane_checkpoint(folder, summary, name)
        out[name] = run
    return out


def _lane_checkpoint(folder: Path, summary: str, name: str) -> str:
    """The run's part of lanes.sh's one listing of every run's checkpoints (checkpoints.txt): the lines under
    the run's bundle folder (the checkpoint folders are named after the bundle)."""
    bundle = re.search(rf"^{re.escape(name)}: bundle=(\S+) ", summary, flags=re.MULTILINE)
    listing = folder / "checkpoints.txt"
    if bundle is None or not listing.exists():
        return ""
    marker = f"/{bundle.group(1)}/"
    return "\n".join(line for line in listing.read_text(encoding="utf-8").splitlines() if marker in line)


def read_runs(path: Path) -> dict:
    if path.is_dir():
        return read_run_dir(path / "rl" if (path / "rl").is_dir() else path)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
        # rl/, or rl<RL_TAG>/ from a second run set on the same machine (lanes.sh rl_pack)
        tops = sorted(p for p in Path(tmp).iterdir() if p.is_dir() and p.name.startswith("rl"))
        return read_run_dir(Path(tmp) / "rl" if (Path(tmp) / "rl").is_dir() or not tops else tops[0])


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def markdown(runs: dict) -> str:
    lines = []
    for name, run in runs.items():
        ended = f"rc {run['rc']}, {run['wall_s']} s" if run["rc"] is not None else "did not end: no summary line"
        lines.append(f"### {name} ({ended})\n")
        if not any(step > 0 for step in run["steps"]):
            lines.append("no training step logged\n")
            continue
        lines.append("| step | " + " | ".join(h for _, h in COLUMNS) + " |")
        lines.append("|---" * (len(COLUMNS) + 1) + "|")
        for step, metrics in sorted(run["steps"].items()):
            if step == 0:
                continue
            lines.append(f"| {step} | " + " | ".join(_cell(metrics.get(k)) for k, _ in COLUMNS) + " |")
        if run["syncs"]:
            lines.append("\nweight syncs (vLLM worker): " + "; ".join(
                f"{s['receive_s']:.3f} s, {s['flat_launches']} flat launches" for s in run["syncs"]))
        if run["kv_scales"]:
            lines.append("\nKV scales applied (min-max over layers): " + "; ".join(
                f"k {a['k'][0]:.4g}-{a['k'][1]:.4g} q {a['q'][0]:.4g}-{a['q'][1]:.4g} v {a['v'][0]:.4g}-{a['v'][1]:.4g}"
                for a in run["kv_scales"]))
        if run["te_report"]:
            first = {r["phase"]: r["line"] for r in run["te_report"]}
            ranks = len({r["pid"] for r in run["te_report"] if r["pid"] is not None})
            lines.append(f"\nTransformerEngine, reported by {ranks} trainer process(es) (first call of each phase): "
                         + " | ".join(first.values()))
        saved = re.findall(r"global_step_(\d+)/actor:", run["checkpoint"])
        lines.append(f"\ncheckpoint: global_step_{', global_step_'.join(saved)}" if saved else "\ncheckpoint: none")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", type=Path, help="rl.tgz from run_h200_rl.sh, or its unpacked folder")
    ap.add_argument("--json", type=Path, help="also write everything parsed here")
    a = ap.parse_args(argv)
    if not a.logs.exists():
        print(f"summarize: {a.logs}: no such file or folder", file=sys.stderr)
        return 2
    runs = read_runs(a.logs)
    if not runs:
        print(f"summarize: {a.logs}: no run log ({', '.join(RUNS)}) in it", file=sys.stderr)
        return 2
    print(markdown(runs))
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
