"""sample_cpu on this machine's own /proc, and summarize_real's CPU % per generation window from its file."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.rl_real.sample_cpu import read_procs, sample
from benchmarks.rl_real.summarize_real import cpu_during


def test_a_busy_python_process_is_sampled_and_its_cpu_share_read_back(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        start = time.time()
        sample(tmp_path, period_s=0.25, rounds=8)
        end = time.time()
    finally:
        busy.kill()
        busy.wait()
    rows = [line.split(",") for line in (tmp_path / "cpu-procs.csv").read_text(encoding="utf-8").splitlines()]
    mine = [(float(t), float(cpu)) for t, pid, name, cpu in rows if int(pid) == busy.pid]
    assert len(mine) >= 4 and all(name.startswith("python") for _, pid, name, _ in rows if int(pid) == busy.pid)
    assert all(b[1] > a[1] for a, b in zip(mine, mine[1:]))  # a line only when its CPU time moved
    (share,) = cpu_during(tmp_path, [(start, end)])
    name = next(n for _, p, n, _ in rows if int(p) == busy.pid)
    assert share[name] > 30, share  # a spinning loop; other python processes of that name add to it


def test_sampling_stops_at_done_and_reads_only_named_processes(tmp_path):
    (tmp_path / "DONE").touch()
    sample(tmp_path, period_s=0.01)
    assert (tmp_path / "cpu-procs.csv").read_text(encoding="utf-8") == ""
    assert all(name.startswith(("ray::", "VLLM", "python")) for name, _ in read_procs().values())


def test_each_window_counts_cpu_seconds_from_its_start_and_sums_one_name(tmp_path):
    (tmp_path / "cpu-procs.csv").write_text(
        "\n".join([
            "100.0,1,VLLM::EngineCore,50.00",  # before the window: its baseline
            "105.0,1,VLLM::EngineCore,54.50",
            "110.0,1,VLLM::EngineCore,59.50",  # 9.5 s of CPU in the 10 s window
            "104.0,2,ray::WorkerDict,3.00",  # started inside: counted from its first sample
            "108.0,2,ray::WorkerDict,4.00",
            "106.0,3,ray::WorkerDict,1.00",
            "109.0,3,ray::WorkerDict,2.00",
            "120.0,1,VLLM::EngineCore,70.00",  # after the window
        ]) + "\n",
        encoding="utf-8",
    )
    assert cpu_during(tmp_path, [(100.0, 110.0)]) == [{"VLLM::EngineCore": 95.0, "ray::WorkerDict": 20.0}]
    assert cpu_during(tmp_path / "missing", [(100.0, 110.0)]) == [{}]
