"""One spec's variants side by side: each run's mean step (steps 2 on) split by phase, one bar per run.

    python -m benchmarks.rl_real.plot_variants OUT.svg LABEL=RUN [LABEL=RUN ...]

RUN is what ``fp8spec report`` reads (a log, a folder of logs, or their .tgz / .zip). The bars are the report's
own split (fp8spec/report/phases.py): generation, old log-prob, reference, update, weight sync, other.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fp8spec.report.build import ReportInputError, make_report
from fp8spec.report.figure import variants_svg


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rl_real.plot_variants", description=__doc__)
    parser.add_argument("out", type=Path, help="the SVG to write")
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN", help="a variant's label and its run")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    if not all("=" in a for a in args.runs):
        print("plot_variants: each run is LABEL=RUN", file=sys.stderr)
        return 2
    out = args.out
    runs = []
    for arg in args.runs:
        label, path = arg.split("=", 1)
        try:
            runs.append((label, make_report(Path(path)).ctx.rows))
        except ReportInputError as err:
            print(f"plot_variants: {err}", file=sys.stderr)
            return 2
    out.write_text(variants_svg(runs, "mean step (steps 2 on) by phase, per variant"), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
