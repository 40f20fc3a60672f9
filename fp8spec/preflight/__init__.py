"""The cluster preflight shipped in every trainer bundle.

``preflight.py`` beside this file is a self-contained program (standard library, torch, ray; never fp8spec):
the compiler copies its text into the bundle and writes the values it checks into ``preflight.json``
(fp8spec.launchers.preflight). Keep it importable on Python 3.8+ without third-party packages at import time.
"""

from __future__ import annotations

from pathlib import Path

PROGRAM = Path(__file__).with_name("preflight.py")
CPU_CHECK = Path(__file__).with_name("preflight_cpus.py")  # preflight.py imports it from beside itself
CHECKS = Path(__file__).with_name("preflight_checks.py")  # and its checks, run where the facts arrive


def program_text() -> str:
    """The text of preflight.py, exactly as it goes into a bundle."""
    return PROGRAM.read_text(encoding="utf-8")


def program_files() -> dict[str, str]:
    """Bundle file name -> text of every preflight program file (preflight.py and the modules it imports from
    beside itself: the Ray CPU check and the checks)."""
    return {path.name: path.read_text(encoding="utf-8") for path in (PROGRAM, CPU_CHECK, CHECKS)}
