"""`fp8spec report` on the command line: text and JSON (one document on success and on every failure), the
exit codes, archives read in memory with unsafe members skipped, the pictures, and `fp8spec rules RPTnnn`."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from fp8spec.report.verdicts import all_verdicts
from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO
from tests.report import runs
from tests.report.runs import BUNDLE_DIRECT, DATA, SPEC_4B

RUN_4B = str(DATA / "real-4b")


def test_text_report_of_the_4b_run_compares_kv_capacity_with_the_plan():
    proc = run_cli_here("report", RUN_4B, "--bundle", str(BUNDLE_DIRECT), "--spec", str(SPEC_4B))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "finished 3 of 3 steps" in out and "patches direct_sync, kv_scales; weight sync direct_sync" in out
    assert "KV cache: 1,351,808 tokens" in out and "1,354,656 planned, 99.8% of plan" in out
    assert "expected +39% to +44% over BF16" in out
    # the run predates replay_poll: verl's 2 s poll rounded its generation times
    assert "warning RPT034 generation ended 0.09-0.13 s past a multiple of 2 s" in out
    assert out.rstrip().endswith("0 error(s), 1 warning(s)")


def test_json_report_is_one_document_with_the_table_and_comparison():
    proc = run_cli_here("report", RUN_4B, "--spec", str(SPEC_4B), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [s["step"] for s in data["steps"]] == [1, 2, 3]
    assert data["comparison"]["kv_cache_tokens"]["planned"] == 1_354_656
    assert data["comparison"]["kv_cache_tokens"]["measured"] == 1_351_808
    assert [v["code"] for v in data["verdicts"]] == ["RPT034"] and data["summary"] == {"errors": 0, "warnings": 1}


def test_the_same_run_gives_the_same_bytes():
    a = run_cli_here("report", RUN_4B, "-f", "json").stdout
    assert a == run_cli_here("report", RUN_4B, "-f", "json").stdout


def test_an_error_verdict_exits_1_and_json_lists_it():
    proc = run_cli_here("report", str(DATA / "megatron-te"), "-f", "json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert [v["code"] for v in data["verdicts"]] == ["RPT020", "RPT034"] and data["summary"]["errors"] == 1


@pytest.mark.parametrize(
    "args",
    [
        ["/nonexistent/run.log"],
        [str(DATA / "real-4b" / "real-4b-h200-fp8kv.log"), "--bundle", "/nonexistent"],
        [str(DATA / "real-4b" / "real-4b-h200-fp8kv.log"), "--spec", "/nonexistent.yaml"],
        [str(DATA / "real-4b" / "real-4b-h200-fp8kv.log"), "--baseline", RUN_4B],  # needs --spec
        [str(DATA / "real-4b" / "real-4b-h200-fp8kv.log"), "-o", ""],
        [str(DATA / "real-4b" / "real-4b-h200-fp8kv.log"), "--no-such-option"],
    ],
    ids=[
        "missing-run",
        "missing-bundle",
        "missing-spec",
        "baseline-without-spec",
        "blank-output",
        "bad-option",
    ],
)
def test_every_failure_prints_one_json_document_and_exits_2(args):
    proc = run_cli_here("report", *args, "-f", "json")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    data = json.loads(proc.stdout)
    assert data["error"]["message"] and "Traceback" not in proc.stderr


def test_unreadable_inputs_are_located_one_line_errors(tmp_path):
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "preflight.json").write_text("{not json", encoding="utf-8")
    proc = run_cli_here("report", RUN_4B, "--bundle", str(tmp_path / "bundle"))
    assert proc.returncode == 2 and proc.stderr.startswith(
        f"fp8spec: error: {tmp_path}/bundle/preflight.json: not JSON"
    )
    fake = tmp_path / "run.tgz"
    fake.write_bytes(b"not an archive")
    proc = run_cli_here("report", str(fake))
    assert proc.returncode == 2 and "not a readable tar archive" in proc.stderr
    assert "Traceback" not in proc.stderr


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)


def test_a_tgz_of_the_run_reads_as_the_folder_and_unsafe_members_are_skipped(tmp_path):
    log = (DATA / runs.LOGS["real-4b"]).read_bytes()
    archive = tmp_path / "run.tgz"
    _tar(
        archive,
        {"run/driver.log": log, "../escape.log": b"step:9 - x:1\n", "/abs.log": b"step:9 - x:1\n"},
        {"run/link.log": "/etc/passwd"},
    )
    proc = run_cli_here("report", str(archive), "-f", "json")
    data = json.loads(proc.stdout)
    assert [s["step"] for s in data["steps"]] == [1, 2, 3]
    skipped = {v["where"].rsplit(":", 1)[-1]: v["message"] for v in data["verdicts"] if v["code"] == "RPT022"}
    assert skipped == {
        "../escape.log": "skipped: a path with '..'",
        "/abs.log": "skipped: an absolute path",
        "run/link.log": "skipped: not a regular file (a link or device)",
    }
    assert not (tmp_path.parent / "escape.log").exists()


def test_a_zip_of_the_run_reads_the_same(tmp_path):
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("run/driver.log", (DATA / runs.LOGS["real-4b"]).read_bytes())
        zf.writestr("../up.log", b"step:9 - x:1\n")
        link = zipfile.ZipInfo("run/link.log")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    data = json.loads(run_cli_here("report", str(archive), "-f", "json").stdout)
    assert [s["step"] for s in data["steps"]] == [1, 2, 3]
    assert [v["message"] for v in data["verdicts"] if v["code"] == "RPT022"] == [
        "skipped: a path with '..'",
        "skipped: a symbolic link",
    ]


def test_pictures_are_written_and_a_symlink_is_refused(tmp_path):
    out = tmp_path / "pics"
    proc = run_cli_here("report", RUN_4B, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    svg = (out / "report.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "step 1 generation: 10.1 s" in svg and "step 3: 0.06708" in svg
    if (out / "report.png").exists():  # matplotlib installed
        assert (out / "report.png").read_bytes()[:4] == b"\x89PNG"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep", encoding="utf-8")
    other = tmp_path / "other"
    other.mkdir()
    os.symlink(victim, other / "report.svg")
    proc = run_cli_here("report", RUN_4B, "-o", str(other))
    assert proc.returncode == 2 and "refusing to replace a symbolic link" in proc.stderr
    assert victim.read_text(encoding="utf-8") == "keep"


def test_rules_lists_and_explains_the_report_verdicts():
    listing = run_cli_here("rules").stdout
    for v in all_verdicts():
        assert f"\n{v.code}  " in listing
    proc = run_cli_here("rules", "RPT010")
    assert proc.returncode == 0 and proc.stdout.startswith("RPT010 mismatch-kl-rising (warning")
    assert "\nWhy: " in proc.stdout and "\nFix: " in proc.stdout
    assert (
        '\nFires on the real 4B run with its mismatch KL scaled by 3 per step (the message says "'
        in proc.stdout
    )
    data = json.loads(run_cli_here("rules", "rpt030", "-f", "json").stdout)
    assert data["code"] == "RPT030" and data["needs"] == "plan"
    assert (
        data["examples"]["message"] == "KV cache 1,051,808 tokens, 78% of the 1,354,656 fp8spec plan predicts"
    )
    codes = {c["code"] for c in json.loads(run_cli_here("rules", "-f", "json").stdout)["report_verdicts"]}
    assert codes == {v.code for v in all_verdicts()}


def test_an_archive_cut_short_reads_what_it_holds_or_says_why(tmp_path):
    archive = tmp_path / "run.tgz"
    _tar(archive, {"run/driver.log": (DATA / runs.LOGS["real-4b"]).read_bytes()}, {})
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    proc = run_cli_here("report", str(cut), "-f", "json")
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    said = data["error"]["message"] if "error" in data else " ".join(v["message"] for v in data["verdicts"])
    assert "cut short or damaged" in said or "cannot read" in said or "not a readable" in said, said


def test_the_picture_is_the_same_bytes_for_the_same_run(tmp_path):
    for name in ("a", "b"):
        assert run_cli_here("report", RUN_4B, "-o", str(tmp_path / name)).returncode == 0
    assert (tmp_path / "a" / "report.svg").read_bytes() == (tmp_path / "b" / "report.svg").read_bytes()


def test_a_bug_in_the_report_is_exit_3_and_one_json_document(monkeypatch):
    import fp8spec.report.build

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(fp8spec.report.build, "make_report", broken)
    proc = run_cli_here("report", RUN_4B, "-f", "json")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["error"]["kind"] == "internal"
    text = run_cli_here("report", RUN_4B)
    assert text.returncode == 3 and text.stderr.startswith(
        "fp8spec: internal error: ZeroDivisionError: a bug"
    )


def test_text_findings_read_like_validate_diagnostics():
    proc = run_cli_here("report", str(DATA / "megatron-te"))
    assert proc.returncode == 1
    assert "tiny-qwen3-moe-megatron-fp8.log:33: error RPT020 the run crashed after step 3: " in proc.stdout
    assert "\n    hint: read the traceback" in proc.stdout


def test_a_folder_without_logs_is_exit_2_and_a_linked_log_is_skipped(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_cli_here("report", str(empty))
    assert proc.returncode == 2 and "no log files" in proc.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "driver.log").write_bytes((DATA / runs.LOGS["real-4b"]).read_bytes())
    secret = tmp_path / "secret.txt"
    secret.write_text("step:1 - timing_s/gen:999\n", encoding="utf-8")
    os.symlink(secret, run / "worker-1.out")
    data = json.loads(run_cli_here("report", str(run), "-f", "json").stdout)
    assert data["steps"][0]["gen_s"] == pytest.approx(10.091228711000042)
    assert [v["message"] for v in data["verdicts"] if v["code"] == "RPT022"] == [
        "skipped: a symbolic link (only regular files are read)"
    ]


def test_a_run_before_its_first_step_is_reported_and_drawn(tmp_path):
    log = tmp_path / "starting.log"
    lines = (DATA / runs.LOGS["real-4b"]).read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join(lines[:5]), encoding="utf-8")  # up to the engine's KV cache line
    proc = run_cli_here("report", str(log), "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "(no step line in the logs read)" in proc.stdout
    assert "warning RPT021 run still running or crashed before its first step" in proc.stdout
    assert (tmp_path / "out" / "report.svg").read_text(encoding="utf-8").startswith("<svg")
    assert "Warning" not in proc.stderr


def test_with_a_baseline_the_picture_sets_the_two_mean_steps_side_by_side(tmp_path):
    from tests.report.runs import DATA as RUNS

    out = tmp_path / "pics"
    fp8, bf16 = RUNS / "window-fp8kv", RUNS / "window-bf16"
    args = ("report", str(fp8 / "real-4b-h200-fp8kv.log"), "--spec", str(fp8 / "spec.yaml"))
    proc = run_cli_here(*args, "--baseline", str(bf16 / "real-4b-h200-bf16.log"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    svg = (out / "report.svg").read_text(encoding="utf-8")
    assert "baseline, mean step update: 91.9 s" in svg and "this run, mean step update: 83.4 s" in svg
    assert "baseline, mean step generation: 22.1 s" in svg and "step 1 generation: 28.1 s" in svg
    alone = tmp_path / "alone"
    assert run_cli_here(*args, "-o", str(alone)).returncode == 0
    assert "mean step" not in (alone / "report.svg").read_text(encoding="utf-8")


def test_the_step_line_carries_the_plans_doubt_where_its_bf16_engine_holds_the_step():
    from tests.report.runs import DATA as RUNS

    run = RUNS / "window-fp8kv"
    log = str(run / "real-4b-h200-fp8kv.log")

    def step_line(spec) -> str:
        proc = run_cli_here("report", log, "--spec", str(spec))
        assert proc.returncode == 0, proc.stderr
        return next(ln for ln in proc.stdout.splitlines() if ln.startswith("  step: "))

    # the run's own spec: its BF16 engine holds all 128 sequences, where the loop measured +0.6 %
    held = step_line(run / "spec.yaml")
    assert held.endswith("of a BF16-rollout step, if it held (the plan's BF16 engine holds all 128 sequences, "
                         "where FP8 measured +0.6%)"), held
    # the long set's spec: its BF16 engine preempts, the regime the expected gain was measured in
    preempting = step_line(REPO / "benchmarks" / "rl_real" / "specs" / "real-4b-h200-long-fp8kv.yaml")
    assert preempting.endswith("of a BF16-rollout step"), preempting
