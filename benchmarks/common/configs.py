"""The driver behind ``run_configs`` (vLLM) and ``run_sglang_configs`` (SGLang): several engine configurations one
after another, one process each (so each starts on a clean GPU), within a time budget.

Each configuration's log goes to DIR/NAME.log and its record to DIR/results.jsonl: the bench's own JSON record
merged with the facts the engine's log gives (``parse_log``). A configuration is not started when less than the
slowest one so far (and at least a minute) is left of the budget; the driver says which were left out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.cli import REPO


@dataclass(frozen=True)
class Config:
    name: str
    argv: list[str]  # the bench's command; ``--json PATH`` is appended
    env: dict
    fallback: dict  # the record when the bench wrote none


def add_arguments(ap: argparse.ArgumentParser, topic: str) -> None:
    ap.add_argument("--out", type=Path, default=Path("out") / topic, help="logs and results.jsonl (default: %(default)s)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting configurations when this much time is nearly spent (default: no limit)")
    ap.add_argument("--args", action="append", default=[], metavar="MODEL='ARGS'",
                    help="extra bench arguments for one model, e.g. qwen3-8b='--prompts 128 --output-len 1024'")


def per_model_args(items: Sequence[str]) -> dict[str, list[str]]:
    extra = {}
    for item in items:
        model, _, text = item.partition("=")
        extra[model] = shlex.split(text)
    return extra


def run_configs(out: Path, budget_s: float | None, configs: Sequence[Config], parse_log: Callable[[str], dict],
                summary: Callable[[dict], str], tail_chars: int, driver: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    slowest = 0.0
    rows = []
    for cfg in configs:
        timeout = None
        if budget_s is not None:
            left = budget_s - (time.perf_counter() - t_start)
            if left < max(slowest * 1.1, 60):
                print(f"{driver}: {left:.0f} s left of the budget, {cfg.name} and later not run", flush=True)
                break
            timeout = max(left - 5, 30)
        rec_path = out / f"{cfg.name}.json"
        log_path = out / f"{cfg.name}.log"
        t0 = time.perf_counter()
        with open(log_path, "w", encoding="utf-8") as log:
            try:
                proc = subprocess.run([*cfg.argv, "--json", str(rec_path)], env=cfg.env, cwd=REPO, stdout=log,
                                      stderr=subprocess.STDOUT, timeout=timeout)
                rc: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        took = time.perf_counter() - t0
        slowest = max(slowest, took)
        text = log_path.read_text(encoding="utf-8", errors="replace")
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else dict(cfg.fallback)
        rec.update(parse_log(text), name=cfg.name, rc=rc, wall_s=round(took, 1))
        if rc != 0:
            rec["error_tail"] = text[-tail_chars:]
        rows.append(rec)
        with open(out / "results.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"{cfg.name}: rc={rc} {took:.0f}s {summary(rec)}", flush=True)
        if rc != 0:
            print(text[-tail_chars:], flush=True)
    return rows


def main(doc: str, topic: str, metavar: str, config: Callable[[str, dict[str, list[str]]], Config],
         parse_log: Callable[[str], dict], summary: Callable[[dict], str], tail_chars: int, driver: str) -> int:
    """A runner's command line: ``config`` turns each item into a configuration (all read before the first
    engine starts, so a typo stops the run at once)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add_arguments(ap, topic)
    ap.add_argument("items", nargs="+", metavar=metavar)
    a = ap.parse_args()
    extra = per_model_args(a.args)
    configs = [config(item, extra) for item in a.items]
    run_configs(a.out, a.budget_s, configs, parse_log, summary, tail_chars, driver)
    return 0
