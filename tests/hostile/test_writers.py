"""Every file fp8spec writes besides a bundle, against what a hostile or unlucky folder holds at its name: a
user's own file, a symbolic link (to a file outside, or to nothing), a FIFO, a file-size limit (RLIMIT_FSIZE,
as `ulimit -f`), a read-only folder. Each writer refuses or fails with one line and exit 2, leaves what was
there exactly as it was, never writes through a link, never blocks, and leaves no temporary file behind.

The writers are the commands' own, run as real processes (a FIFO that blocks is a timeout here, not a hung
suite; a file-size limit and HOME belong to a process)."""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import REPO, SPECS
from tests.unprivileged import unprivileged

PLAN_SPEC = SPECS / "qwen3-8b.yaml"


@dataclass(frozen=True)
class Writer:
    """One output of one command: the command line that writes ``target`` (relative to the test's folder)."""

    name: str
    target: str
    argv: Callable[[Path], list[str]]
    force: bool = True  # the command has --force (a user's file may then be replaced)
    edits: bool = False  # the command edits the file that is there (the rc file), with the user's consent
    home: bool = False  # runs from bash with HOME=<test folder>/home
    replaces_own: bool = True  # a second run replaces (or keeps) what the first wrote, without --force
    old: bytes = b"# the previous content, which must survive\n" * 3  # one it may replace (with --force)

    def run(self, tmp: Path, *extra: str, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        cmd = [sys.executable, "-m", "fp8spec.cli", *self.argv(tmp), *extra]
        if self.home:
            env.update(HOME=str(tmp / "home"), SHELL="/bin/bash")
            # bash as the parent process, so that fp8spec detects it; '; exit' keeps bash from exec'ing
            cmd = ["bash", "-c", " ".join(map(_quote, cmd)) + '; exit "$?"']

        def limit() -> None:
            if limit_bytes is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

        return _run(cmd, env, limit)


def _run(cmd: list[str], env: dict, preexec=None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group: one that blocks (a FIFO opened for writing) is killed with all its
    children after a timeout, and the test fails instead of waiting on their pipes."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
                            preexec_fn=preexec, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(f"{' '.join(cmd)}: still running after 90 s (blocked?)")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


WRITERS = [
    Writer("schema -o", "out/schema.json", lambda t: ["schema", "-o", str(t / "out" / "schema.json")]),
    Writer("schema --docs", "out/spec.md", lambda t: ["schema", "--docs", str(t / "out" / "spec.md")]),
    # a written spec is the user's to edit: init replaces it only with --force
    Writer("init -o", "out/my.yaml", lambda t: ["init", "-o", str(t / "out" / "my.yaml")], replaces_own=False),
    Writer("plan -o png", "out/plan.png", lambda t: ["plan", str(PLAN_SPEC), "-o", str(t / "out")]),
    Writer("plan -o svg", "out/plan.svg", lambda t: ["plan", str(PLAN_SPEC), "-o", str(t / "out")]),
    Writer("completion script", "home/.bash_completions/fp8spec.sh", lambda t: ["--install-completion"],
           force=False, home=True, old=b"# an older fp8spec's script: _FP8SPEC_COMPLETE=complete_bash\n" * 3),
    Writer("completion rc line", "home/.bashrc", lambda t: ["--install-completion"], force=False, edits=True,
           home=True),
]
IDS = [w.name for w in WRITERS]


def _prepare(tmp: Path, writer: Writer) -> Path:
    target = tmp / writer.target
    target.parent.mkdir(parents=True, exist_ok=True)
    (tmp / "home").mkdir(exist_ok=True)
    return target


def _tree(folder: Path) -> dict[str, object]:
    """Every entry under ``folder`` with its kind and, for a file, its bytes (links not followed)."""
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            st = os.lstat(path)
            rel = str(path.relative_to(folder))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = path.read_bytes()
            else:
                out[rel] = stat.S_IFMT(st.st_mode)
    return out


def _refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fp8spec: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.mark.parametrize("writer", [w for w in WRITERS if not w.edits], ids=[w.name for w in WRITERS if not w.edits])
def test_a_users_file_is_not_replaced_without_force(tmp_path, writer):
    target = _prepare(tmp_path, writer)
    target.write_bytes(b"my own notes\n")
    before = _tree(tmp_path)
    error = _refused(writer.run(tmp_path))
    assert "already exists" in error and ("--force" in error) == writer.force
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
@pytest.mark.parametrize("dangling", [False, True], ids=["link to a file", "dangling link"])
def test_a_symbolic_link_at_the_name_is_never_followed(tmp_path, writer, dangling):
    target = _prepare(tmp_path, writer)
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_bytes(b"victim data\n")
    target.symlink_to(victim)
    before = _tree(tmp_path)
    error = _refused(writer.run(tmp_path, *(["--force"] if writer.force else [])))
    assert "symbolic link" in error
    assert _tree(tmp_path) == before, "the link and what it points at are as they were"


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_special_file_at_the_name_is_refused_without_blocking(tmp_path, writer, kind):
    target = _prepare(tmp_path, writer)
    if kind == "fifo":
        os.mkfifo(target)  # opening it for writing would block until a reader comes
    else:
        target.mkdir()
    before = _tree(tmp_path)
    error = _refused(writer.run(tmp_path, *(["--force"] if writer.force else [])))
    assert ("named pipe" if kind == "fifo" else "a folder") in error
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_a_file_size_limit_leaves_the_old_file_whole(tmp_path, writer):
    """`ulimit -f`: the write fails part-way (EFBIG); the old file keeps its bytes, no part of a new one stays."""
    target = _prepare(tmp_path, writer)
    old = writer.old
    target.write_bytes(old)
    before = _tree(tmp_path)
    proc = writer.run(tmp_path, *(["--force"] if writer.force else []), limit_bytes=len(old) + 10)
    error = _refused(proc)
    assert "File too large" in error
    assert _tree(tmp_path) == before, "the old file as it was, and no temporary file left"


@pytest.mark.parametrize("writer", [w for w in WRITERS if w.name in ("plan -o png", "completion script")],
                         ids=["plan -o", "completion"])
def test_a_failed_write_leaves_no_folder_it_created(tmp_path, writer):
    (tmp_path / "home").mkdir()
    before = _tree(tmp_path)
    proc = writer.run(tmp_path, limit_bytes=100)
    assert "File too large" in _refused(proc)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_a_read_only_folder_is_a_located_exit_2(tmp_path, writer):
    _prepare(tmp_path, writer)
    folder = (tmp_path / writer.target).parent
    os.chmod(folder, 0o555)
    try:
        before = _tree(tmp_path)
        argv = writer.argv(tmp_path)
        env = dict(os.environ)
        cmd = unprivileged([sys.executable, "-m", "fp8spec.cli", *argv])
        if writer.home:
            env.update(HOME=str(tmp_path / "home"), SHELL="/bin/bash")
            cmd = ["bash", "-c", " ".join(map(_quote, cmd)) + '; exit "$?"']
        error = _refused(_run(cmd, env))
        assert "Permission denied" in error
        assert _tree(tmp_path) == before
    finally:
        os.chmod(folder, 0o755)


@pytest.mark.parametrize("writer", [w for w in WRITERS if not w.edits], ids=[w.name for w in WRITERS if not w.edits])
def test_a_new_file_is_whole_and_honours_the_umask(tmp_path, writer):
    target = _prepare(tmp_path, writer)
    proc = writer.run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert target.stat().st_size > 100 and stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()
    assert not [p for p in target.parent.iterdir() if ".tmp-" in p.name]
    first = target.read_bytes()
    again = writer.run(tmp_path)  # its own file: replaced (or left, being the same) without --force
    assert again.returncode == (0 if writer.replaces_own else 2), again.stdout + again.stderr
    assert target.read_bytes() == first


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
