"""What `fp8spec plan` predicts for the real-size RL specs, as one JSON the run's comparison reads
(summarize_real.py: KV capacity, trainer peak, preemption against what the run showed).

    python -m benchmarks.rl_real.plan_predictions            # (re)write benchmarks/rl_real/plan_predictions.json
    python -m benchmarks.rl_real.plan_predictions --check    # exit 1 if the file is not what it would write

Also records why the one-H200 sets are what they are: the 8B FP8 KV spec planned on ONE H200 (the x2 spec with
gpus_per_node 1), whose training peak does not fit; the MoE end-to-end FP8 spec with a tenth layer, whose trainer
state leaves the engine too little room.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ruamel.yaml import YAML

HERE = Path(__file__).resolve().parent
SPECS = HERE / "specs"
OUT = HERE / "plan_predictions.json"
GIB = 1024**3


def _plan(spec: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "fp8spec.cli", "plan", str(spec), "-f", "json"],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode not in (0, 1):  # 1: the spec has errors, the plan is still printed
        raise SystemExit(f"plan_predictions: fp8spec plan {spec.name} exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def _gib(q: dict) -> float:
    return round(q["value"] / GIB, 2)


def summary(plan: dict) -> dict:
    """The figures the run can be checked against, for the spec's own rollout choice."""
    chosen = next(r for r in plan["rollout"] if r["spec_choice"])
    kv, mem, step = chosen["kv_cache"], chosen["memory"], chosen["step"]
    eng, tr = plan["engine"], plan["trainer"]
    return {
        "rollout_choice": chosen["choice"],
        "engine": {k: (eng[k]["value"] if isinstance(eng[k], dict) else eng[k])
                   for k in ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                             "tp", "replicas", "runner", "version")},
        "kv_cache_tokens": kv["capacity"]["value"],
        "available_kv_gib": _gib(mem["available_kv"]),
        "engine_weights_gib": _gib(mem["weights"]),
        "sequence_length_tokens": kv["sequence_length"]["value"],
        "concurrent_sequences_at_sequence_length": round(kv["concurrent_sequences_at_sequence_length"]["value"], 1),
        "sequences_per_replica": step["sequences_per_replica"]["value"],
        "preempts": not step["fits_without_preemption"],
        "trainer_peak_gib": _gib(tr["peak"]),
        "trainer_state_gib": _gib(tr["state"]),
        "trainer_resident_during_rollout_gib": _gib(tr["resident_during_rollout"]),
        "trainer_offload": tr["offload"],
        "gpu_total_gib": _gib(plan["gpu"]["total_memory"]),
        "verdicts_failing": sorted(v["code"] for v in plan["verdicts"] if not v["ok"]),
    }


def one_gpu_8b() -> dict:
    """The 8B FP8 KV spec with gpus_per_node 1: the figure that rules 8B out on one H200."""
    y = YAML()
    spec = y.load((SPECS / "real-8b-h200x2-fp8kv.yaml").read_text(encoding="utf-8"))
    spec["hardware"]["gpus_per_node"] = 1
    spec["model"]["config_path"] = str((SPECS / spec["model"]["config_path"]).resolve())
    spec["reward"]["custom_function"]["path"] = str((SPECS / spec["reward"]["custom_function"]["path"]).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "real-8b-h200-fp8kv.yaml"
        with path.open("w", encoding="utf-8") as fh:
            y.dump(spec, fh)
        return summary(_plan(path))


def _variant(source: str, name: str, edit) -> dict:
    """The plan of a generated spec changed by ``edit(spec, folder)`` (written to a temporary file)."""
    y = YAML()
    spec = y.load((SPECS / source).read_text(encoding="utf-8"))
    spec["model"]["config_path"] = str((SPECS / spec["model"]["config_path"]).resolve())
    spec["reward"]["custom_function"]["path"] = str((SPECS / spec["reward"]["custom_function"]["path"]).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        edit(spec, Path(tmp))
        path = Path(tmp) / f"{name}.yaml"
        with path.open("w", encoding="utf-8") as fh:
            y.dump(spec, fh)
        return summary(_plan(path))


def moe_tenth_layer() -> dict:
    """The MoE end-to-end FP8 spec with 10 of Qwen3-30B-A3B's layers instead of 9."""

    def edit(spec, folder: Path) -> None:
        config = json.loads(Path(spec["model"]["config_path"]).read_text(encoding="utf-8"))
        config["num_hidden_layers"] = config["max_window_layers"] = 10
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        spec["model"]["config_path"] = str(folder / "config.json")

    return _variant("real-moe9l-h200-fp8-e2e.yaml", "real-moe10l-h200-fp8-e2e", edit)


def render() -> str:
    specs = {p.stem: summary(_plan(p)) for p in sorted(SPECS.glob("*.yaml"))}
    data = {
        "about": "fp8spec plan's predictions per spec (the spec's rollout choice); sizes in GiB (2^30 bytes); "
                 "written by benchmarks/rl_real/plan_predictions.py",
        "specs": specs,
        "rejected": {"real-8b-h200-fp8kv (8B shape on ONE H200)": one_gpu_8b(),
                     "real-moe10l-h200-fp8-e2e (a tenth MoE layer)": moe_tenth_layer()},
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print("plan_predictions: plan_predictions.json is stale; run plan_predictions.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"plan_predictions: wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
