"""fp8spec.safe_write, the writer every non-bundle output goes through: signals and killed runs leave no
temporary file and the old file whole; several files are written together or not at all; a file that holds
the content already is left alone. Plus what the writers' commands do around it: plan -o without matplotlib,
model names drawn literally, -o onto something that is not a folder."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, REPO, SPECS, require


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _in_process(code: str, *, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    import resource

    def limit() -> None:
        # a shell started under nohup ignores SIGHUP, and children inherit it: the test's process starts with the
        # default dispositions a user's shell gives it
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=REPO, timeout=60, preexec_fn=limit)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_write_leaves_the_old_file_and_no_temporary(tmp_path, signum):
    target = tmp_path / "s.json"
    target.write_text("old\n")
    proc = _in_process(f"""
        import os
        from pathlib import Path
        from fp8spec import safe_write
        real = safe_write.write_all
        def half_then_signal(fd, data):
            os.write(fd, data[: len(data) // 2])
            os.kill(os.getpid(), {int(signum)})
            real(fd, data)
        safe_write.write_all = half_then_signal
        safe_write.write_file(safe_write.Target(Path({str(target)!r}), b"new content" * 1000, force=True))
        print("not reached")
    """)
    assert proc.returncode == -signum, proc.stdout + proc.stderr  # ended by the signal, as without the writer
    assert "not reached" not in proc.stdout
    assert target.read_text() == "old\n" and _entries(tmp_path) == ["s.json"]


def test_a_killed_runs_temporary_is_removed_by_the_next_write_and_a_live_ones_is_kept(tmp_path):
    from fp8spec.safe_write import Target, WriteError, write_file, write_files  # noqa: F401

    target = tmp_path / "plan.svg"
    dead = tmp_path / ".plan.svg.tmp-0123456789abcdef"
    live = tmp_path / ".plan.svg.tmp-fedcba9876543210"
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a run that is still writing holds its lock
    try:
        assert write_file(Target(target, b"<svg/>")) is True
    finally:
        os.close(fd)
    assert _entries(tmp_path) == [live.name, "plan.svg"]


def test_several_files_are_written_together_or_not_at_all(tmp_path):
    """The second file fails part-way (a file-size limit) after the first was staged: neither changes."""
    a, b = tmp_path / "a.json", tmp_path / "b.md"
    a.write_text("old a\n")
    b.write_text("old b\n")
    proc = _in_process(f"""
        from pathlib import Path
        from fp8spec.safe_write import Target, write_files
        write_files([Target(Path({str(a)!r}), b"a" * 100, force=True),
                     Target(Path({str(b)!r}), b"b" * 100_000, force=True)])
    """, limit_bytes=10_000)
    assert proc.returncode == 1 and "WriteError" in proc.stderr and "File too large" in proc.stderr
    assert a.read_text() == "old a\n" and b.read_text() == "old b\n"
    assert _entries(tmp_path) == ["a.json", "b.md"]


def test_a_refusal_of_any_file_writes_none(tmp_path):
    from fp8spec.safe_write import Target, WriteError, write_file, write_files  # noqa: F401

    a, b = tmp_path / "a.json", tmp_path / "b.md"
    b.write_text("the user's\n")
    with pytest.raises(WriteError, match="b.md already exists"):
        write_files([Target(a, b"new"), Target(b, b"new")])
    assert _entries(tmp_path) == ["b.md"]


def test_a_file_that_holds_the_content_is_left_alone(tmp_path):
    from fp8spec.safe_write import Target, WriteError, write_file, write_files  # noqa: F401

    target = tmp_path / "s.json"
    target.write_bytes(b"same")
    os.utime(target, (1, 1))
    assert write_file(Target(target, b"same")) is False
    assert target.stat().st_mtime == 1


def test_schema_writes_output_and_docs_together_and_refuses_a_users_file_for_both(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.md"
    proc = run_cli_here("schema", "-o", str(a), "--docs", str(b))
    assert proc.returncode == 0 and a.read_text().startswith("{") and b.read_text().startswith("# Spec field")
    a.unlink()
    b.write_text("# my notes\n")
    proc = run_cli_here("schema", "-o", str(a), "--docs", str(b))
    assert proc.returncode == 2 and "already exists; use --force" in proc.stderr
    assert _entries(tmp_path) == ["b.md"] and b.read_text() == "# my notes\n"
    assert run_cli_here("schema", "-o", str(a), "--docs", str(b), "--force").returncode == 0
    assert b.read_text().startswith("# Spec field")


def test_plan_without_matplotlib_writes_the_svg_and_says_the_png_needs_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails as when it is absent
    monkeypatch.delitem(sys.modules, "fp8spec.plan.figure", raising=False)
    proc = run_cli_here("plan", str(SPECS / "qwen3-8b.yaml"), "-o", str(tmp_path / "pl"))
    assert proc.returncode == 0, proc.stderr
    assert _entries(tmp_path / "pl") == ["plan.svg"]
    assert "plan.png needs matplotlib: pip install 'fp8spec[plot]'; wrote only plan.svg" in proc.stderr


NAMES = ["m$\\nosuchcmd$x", "price$x^2$", "a$b", "$$", "a\\$b$c$", "$\\frac{1}{0}$ \\\\"]


@pytest.fixture
def plan_of(validate):
    from fp8spec.plan import build_memory_plan
    from fp8spec.rules.plan_columns import judged

    def run():
        result = validate(BASE_SPEC)
        return judged(build_memory_plan(result.context), result.context)

    return run


@pytest.mark.parametrize("name", NAMES)
def test_model_names_are_drawn_literally(plan_of, name):
    require("matplotlib")
    import dataclasses

    import matplotlib.pyplot as plt

    from fp8spec.plan.figure import plan_figure, plan_png
    from fp8spec.plan.pictures import PNG_MARK, SOFTWARE

    plan = plan_of()
    model = plan.spec.model.model_copy(update={"name": name})
    plan = dataclasses.replace(plan, spec=plan.spec.model_copy(update={"model": model}))
    fig = plan_figure(plan)
    try:
        title = fig.axes[0].title
        drawn, is_math = title._preprocess_math(title.get_text())
        assert (drawn, is_math) == (f"{name}: KV cache capacity", False)
    finally:
        plt.close(fig)
    png = plan_png(plan, SOFTWARE)
    assert png.startswith(b"\x89PNG") and PNG_MARK in png[:4096]


def test_plan_with_a_mathtext_name_writes_its_pictures(tmp_path):
    for sub in ("models/tiny-qwen3", "rewards"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "models/tiny-qwen3/config.json").write_bytes((SPECS / "models/tiny-qwen3/config.json").read_bytes())
    (tmp_path / "rewards/tiny_arith.py").write_bytes((SPECS / "rewards/tiny_arith.py").read_bytes())
    text = (SPECS / "tiny-qwen3-h200.yaml").read_text().replace("name: local/tiny-qwen3", 'name: "m$\\\\nosuchcmd$x"')
    (tmp_path / "spec.yaml").write_text(text)
    proc = run_cli_here("plan", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "pl"))
    assert proc.returncode == 0, proc.stderr
    assert _entries(tmp_path / "pl") == ["plan.png", "plan.svg"]


@pytest.mark.parametrize("command", ["compile", "plan"])
@pytest.mark.parametrize("what", ["a file", "a dangling link"])
def test_output_onto_something_that_is_not_a_folder_says_so(tmp_path, command, what):
    out = tmp_path / "out"
    if what == "a file":
        out.write_text("x")
    else:
        out.symlink_to(tmp_path / "nowhere")
    proc = run_cli_here(command, str(SPECS / "qwen3-8b.yaml"), "-o", str(out))
    assert proc.returncode == 2
    last = proc.stderr.splitlines()[-1]
    assert "not a folder" in last and "File exists" not in last, last
    assert _entries(tmp_path) == ["out"] and not (tmp_path / "nowhere").exists()
