"""What every benchmark's command line shares: the repository root, the default output folder, and the
environment of the processes a benchmark starts (engines, their workers, one configuration per process)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def default_out(topic: str) -> Path:
    """``out/<topic>`` under the current folder (``/out/`` is git-ignored at the repository root)."""
    return Path("out") / topic


def child_env(base: dict | None = None) -> dict:
    """``base`` (default: this process's environment) with the repository root first on PYTHONPATH: child
    processes and the engines' workers import ``benchmarks.*`` and ``fp8spec`` by name, from any folder."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_logged(argv: list[str], env: dict, log_path: Path, timeout_s: float, label: str,
               tail_chars: int = 2500) -> int | str:
    """One engine process of a probe: its output into ``log_path``, its exit code (or "timeout") printed under
    ``label``, and the log's tail printed when it failed, so a failure reads from the driver's own output."""
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            code: int | str = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    print(f"{label}: rc={code}", flush=True)
    if code != 0:
        print(log_path.read_text(encoding="utf-8", errors="replace")[-tail_chars:], flush=True)
    return code
