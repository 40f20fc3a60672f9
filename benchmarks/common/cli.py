"""What every benchmark's command line shares: the repository root, the default output folder, and the
environment of the processes a benchmark starts (engines, their workers, one configuration per process)."""

from __future__ import annotations

import os
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
