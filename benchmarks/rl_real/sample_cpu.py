"""Host CPU of the run's processes, once a second, until DIR/DONE exists.

    python -m benchmarks.rl_real.sample_cpu DIR

Appends ``time, pid, name, cpu seconds`` (utime + stime from /proc/PID/stat) to DIR/cpu-procs.csv for every
process named like Ray's workers (``ray::...``), vLLM's engine core and workers (``VLLM::...``) or Python, and
only for those that used CPU since the last sample. ``summarize_real`` turns it into each process's CPU % over
each generation: a process near 100 % there holds the GPU back (the GPU busy % says how much the GPU waited).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

PREFIXES = ("ray::", "VLLM", "python")
TICK = os.sysconf("SC_CLK_TCK")


def read_procs(proc: Path = Path("/proc")) -> dict[int, tuple[str, float]]:
    """pid -> (name, CPU seconds so far) of the processes named with PREFIXES."""
    out: dict[int, tuple[str, float]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended between the glob and the read
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if not name.startswith(PREFIXES):
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out[int(stat.parent.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)  # utime, stime
    return out


def sample(folder: Path, period_s: float = 1.0, rounds: int = 0) -> None:
    """Append the busy processes' CPU seconds every ``period_s`` until folder/DONE (or ``rounds`` samples, or the
    folder is gone: rl-wait archives and removes it)."""
    seen: dict[int, float] = {}
    done = 0
    with (folder / "cpu-procs.csv").open("a", encoding="utf-8") as out:
        while folder.is_dir() and not (folder / "DONE").exists() and (rounds == 0 or done < rounds):
            now = time.time()
            for pid, (name, cpu) in sorted(read_procs().items()):
                if cpu != seen.get(pid):
                    out.write(f"{now:.3f},{pid},{name.replace(',', ' ')},{cpu:.2f}\n")
                    seen[pid] = cpu
            out.flush()
            done += 1
            time.sleep(period_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rl_real.sample_cpu", description=__doc__)
    parser.add_argument("dir", type=Path, help="the run's folder (sampling stops when DIR/DONE exists)")
    parser.add_argument("--period-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    sample(args.dir, args.period_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
