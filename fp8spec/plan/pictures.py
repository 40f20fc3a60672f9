"""What `fp8spec plan -o DIR` writes, and which existing files it may replace without --force.

plan.svg needs no library and is always written; plan.png needs matplotlib (the `plot` extra) and is left out
without it, with a note. A plan.png or plan.svg already in DIR is replaced only when it is a regular file that
fp8spec drew: a PNG carrying the 'Software: fp8spec plan' entry (fp8spec.plan.figure writes it), an SVG that
opens as fp8spec.plan.svg's pictures do. Anything else there (a picture of the user's, a link, a FIFO) is refused
unless --force, and a link or special file even with it (fp8spec.safe_write).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from fp8spec.safe_write import Target

SOFTWARE = "fp8spec plan"
PNG_MARK = b"tEXtSoftware\x00" + SOFTWARE.encode("ascii")
PNG_NEEDS = "plan.png needs matplotlib: pip install 'fp8spec[plot]'"
# Address space that loading numpy + matplotlib and drawing the figure takes (about 125 MiB measured on Linux
# x86-64 with one OpenBLAS thread), with a margin.
MATPLOTLIB_ROOM = 160 * 1024 * 1024


def _room_for_matplotlib() -> None:
    """MemoryError when an address-space limit (ulimit -v) leaves too little room to load numpy: its OpenBLAS
    ends the process with exit 1 and no Python error when it cannot reserve its buffers, so the limit is
    checked before, where the failure can still be reported (exit 2)."""
    if "numpy" in sys.modules:
        return
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return
        with open("/proc/self/status", encoding="ascii") as fh:
            found = re.search(r"^VmSize:\s+(\d+) kB", fh.read(), re.M)
    except (ImportError, OSError, ValueError):
        return  # not Linux: nothing to measure with
    if found and soft - int(found.group(1)) * 1024 < MATPLOTLIB_ROOM:
        raise MemoryError("the address-space limit leaves too little room to load matplotlib")


def _png_is_ours(old: bytes) -> bool:
    return old.startswith(b"\x89PNG\r\n\x1a\n") and PNG_MARK in old[:4096]


def _svg_is_ours(old: bytes) -> bool:
    from fp8spec.plan.svg import H, W

    return old.startswith(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '.encode())


def picture_targets(result: Any, folder: Path, force: bool) -> tuple[list[Target], list[str]]:
    """The files to write for ``result`` into ``folder``, and notes for the user (a picture left out)."""
    from fp8spec.plan.svg import plan_svg

    targets = []
    notes = []
    _room_for_matplotlib()
    try:
        from fp8spec.plan.figure import plan_png
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("matplotlib"):
            raise  # an install that is broken otherwise, or a library that could not be loaded: not "absent"
        notes.append(f"{PNG_NEEDS}; wrote only plan.svg")
    else:
        targets.append(Target(folder / "plan.png", plan_png(result, SOFTWARE), force, _png_is_ours))
    targets.append(Target(folder / "plan.svg", plan_svg(result).encode("utf-8"), force, _svg_is_ours))
    return targets, notes
