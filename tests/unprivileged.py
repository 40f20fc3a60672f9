"""Run a command that the kernel holds to file permissions, as the user who cloned the repository.

Root reads and searches anything (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a permission test run as root
must give that up. Switching to another user (nobody) would also lose the checkout and its venv whenever they
sit in a private (0700) folder, as a clone in a home directory or made with `mktemp -d` does. So
root keeps its uid and drops every capability instead: with an empty bounding set, exec gives uid 0 no
capabilities, and the mode bits bind it as they bind any owner (a mode-0 file is unreadable, a 0600 folder
unsearchable), while the 0700 clone stays its own."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

DROP_ALL = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]


def unprivileged(cmd: list[str]) -> list[str]:
    """``cmd``, prefixed so that it runs without the capabilities that bypass file permissions."""
    if os.geteuid() != 0:
        return cmd
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: cannot drop the capabilities that bypass file modes")
    probe = subprocess.run([*DROP_ALL, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:  # no CAP_SETPCAP here (a container that withholds it)
        pytest.skip(f"running as root and cannot drop capabilities: {probe.stderr.strip()}")
    return [*DROP_ALL, *cmd]
