"""CPU benchmark: how long fp8spec takes to reject each hostile input (target: well under a second).

For every file in tests/hostile/corpus/ and every special file (symlinks to /dev/zero and /dev/urandom, a
FIFO, a 1 GiB sparse file) it times, best of --repeat:

* ``read+check``: reading and checking the spec in this process (``fp8spec.rules.runner.validate_path``),
  which is what the limits bound;
* ``cli``: the whole ``fp8spec validate`` command in a fresh process (interpreter start and imports included).

Usage: python -m benchmarks.bench_hostile [--repeat 3] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from fp8spec.rules.runner import validate_path  # noqa: E402
from fp8spec.specfile.loader import InputError  # noqa: E402


def special_files(folder: Path) -> dict[str, Path]:
    out = {}
    for name, target in (("dev-zero", "/dev/zero"), ("dev-urandom", "/dev/urandom")):
        (folder / f"{name}.yaml").symlink_to(target)
        out[name] = folder / f"{name}.yaml"
    os.mkfifo(folder / "fifo.yaml")
    out["fifo"] = folder / "fifo.yaml"
    with open(folder / "sparse.yaml", "wb") as fh:
        fh.truncate(1 << 30)
    out["sparse-1GiB"] = folder / "sparse.yaml"
    return out


def in_process(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        validation = validate_path(path, path.name)
        errors = [d for d in validation.diagnostics if d.severity == "error"]
        outcome = errors[0].code if errors else "ok"
    except InputError as err:
        outcome = err.diagnostic.code
    return time.perf_counter() - start, outcome


def cli(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fp8spec.cli", "validate", str(path)], cwd=REPO,
                          capture_output=True, timeout=120)
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = {p.stem: p for p in sorted((REPO / "tests" / "hostile" / "corpus").glob("*.yaml"))}
        cases.update(special_files(Path(tmp)))
        validate_path(REPO / "specs" / "qwen3-8b.yaml")  # warm the caches (profiles, catalog) once
        rows = []
        print(f"{'case':40s} {'outcome':>8s} {'read+check':>11s} {'cli':>8s} exit")
        for name, path in cases.items():
            best, outcome = min(in_process(path) for _ in range(args.repeat))
            wall, code = min(cli(path) for _ in range(args.repeat))
            rows.append({"case": name, "outcome": outcome, "read_check_s": round(best, 4),
                         "cli_s": round(wall, 3), "exit": code})
            print(f"{name:40s} {outcome:>8s} {best * 1000:9.1f}ms {wall:7.2f}s {code}")
    worst = max(rows, key=lambda r: r["read_check_s"])
    print(f"slowest read+check: {worst['case']} {worst['read_check_s'] * 1000:.1f} ms; "
          f"slowest cli: {max(r['cli_s'] for r in rows):.2f} s")
    if args.out:
        summary = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "rows": rows}
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
