"""--force replaces only a bundle folder fp8spec wrote and nobody changed (anything else at the name is refused,
located, exit 2, untouched); the replace never leaves the name empty, and a bundle a killed run parked is
restored by the next compile, never deleted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fp8spec.compiler import writer
from fp8spec.compiler.writer import WriteError, write_bundle
from tests.cli.inprocess import run_cli_here
from tests.compiler.test_writer import with_manifest
from tests.conftest import BASE_SPEC, REPO, dump_yaml, patched
from tests.unprivileged import unprivileged

OLD = with_manifest({"launch.sh": "#!/bin/sh\necho old\n", "lib/m.py": "x = 1\n"})
NEW = with_manifest({"launch.sh": "#!/bin/sh\necho new\n"})


def tree(root: Path) -> dict[str, object]:
    """Everything under ``root`` (itself included), by relative name: bytes, 'dir', or a link's target."""
    out: dict[str, object] = {}
    for path in [root, *sorted(root.rglob("*"))] if root.is_dir() and not root.is_symlink() else [root]:
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "special"
    return out


def _user_folder(t: Path) -> None:
    (t / "data").mkdir(parents=True)
    (t / "notes.txt").write_text("three weeks of notes\n")
    (t / "data" / "results.csv").write_text("1,2\n")


def _bundle(t: Path) -> None:
    write_bundle(t.parent, t.name, OLD)


def _bundle_plus(rel: str, text: str = "mine\n"):
    def make(t: Path) -> None:
        _bundle(t)
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        (t / rel).write_text(text)

    return make


def _bundle_with_folder(t: Path) -> None:
    _bundle(t)
    (t / "results").mkdir()


def _bundle_with_link(t: Path) -> None:
    _bundle(t)
    (t / "data").symlink_to("/etc")


def _foreign_manifest(t: Path) -> None:
    t.mkdir()
    (t / "manifest.json").write_text('{"name": "my experiment", "files": []}\n')


NOT_OURS = {
    "a user's folder": (_user_folder, "has no manifest.json, so fp8spec did not write it"),
    "a regular file": (lambda t: t.write_text("a file\n"), "it is a file, not a bundle folder"),
    "a named pipe": (lambda t: os.mkfifo(t), "it is a named pipe, not a bundle folder"),
    "a manifest fp8spec did not write": (_foreign_manifest, "its manifest.json is not one fp8spec writes"),
    "a bundle with a Slurm log added": (_bundle_plus("slurm-17.out"), "holds slurm-17.out, which fp8spec"),
    "a bundle with an edited file": (_bundle_plus("launch.sh"), "launch.sh was changed after fp8spec wrote"),
    "a bundle with a folder added": (_bundle_with_folder, "holds the folder results/, which fp8spec"),
    "a bundle with a symbolic link inside": (_bundle_with_link, "data is a symbolic link, which fp8spec"),
    "a bundle with a file in __pycache__": (_bundle_plus("lib/__pycache__/notes.txt"), "__pycache__/notes.txt"),
}


@pytest.mark.parametrize("case", sorted(NOT_OURS))
def test_force_refuses_what_fp8spec_did_not_write(tmp_path, case):
    make, why = NOT_OURS[case]
    out = tmp_path / "out"
    out.mkdir()
    make(out / "b")
    before = tree(out)
    with pytest.raises(WriteError) as err:
        write_bundle(out, "b", NEW, force=True)
    assert "not replaced" in str(err.value) and why in str(err.value), err.value
    assert "\n" not in str(err.value)
    assert tree(out) == before, "nothing touched, nothing left behind"


def test_force_replaces_a_bundle_with_python_byte_code_added(tmp_path):
    _bundle(tmp_path / "b")
    (tmp_path / "b" / "lib" / "__pycache__").mkdir()
    (tmp_path / "b" / "lib" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00")
    write_bundle(tmp_path, "b", NEW, force=True)
    assert (tmp_path / "b" / "launch.sh").read_text().endswith("new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_force_never_empties_the_name(tmp_path, monkeypatch):
    """Where the file system swaps two folders in one step (Linux renameat2), the old bundle is never renamed
    away from the name: there is no moment without a bundle there."""
    probe_a, probe_b = tmp_path / "x", tmp_path / "y"
    probe_a.mkdir()
    probe_b.mkdir()
    if not writer._exchange(probe_a, probe_b):
        pytest.skip("this file system has no atomic exchange; the two-rename path is tested below")
    _bundle(tmp_path / "out" / "b")
    renames: list[tuple[str, str]] = []
    real = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (renames.append((str(a), str(b))), real(a, b))[1])
    write_bundle(tmp_path / "out", "b", NEW, force=True)
    assert not any(a == str(tmp_path / "out" / "b") for a, _ in renames), renames
    assert (tmp_path / "out" / "b" / "launch.sh").read_text().endswith("new\n")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["b"]


def test_interrupt_between_the_two_renames_puts_the_old_bundle_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _bundle(out / "b")
    before = tree(out)
    monkeypatch.setattr(writer, "_exchange", lambda a, b: False)  # a file system without the swap (NFS)
    real = os.rename

    def rename(a, b):
        if ".tmp-" in str(a):
            raise KeyboardInterrupt  # Ctrl-C after the old bundle was parked
        real(a, b)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        write_bundle(out, "b", NEW, force=True)
    assert tree(out) == before


KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
from fp8spec.compiler import writer
writer._exchange = lambda a, b: False  # a file system without the swap (NFS)
real = os.rename
def rename(a, b):
    real(a, b)
    if ".old-" in str(b):
        os.kill(os.getpid(), signal.SIGKILL)  # killed right after parking the old bundle
os.rename = rename
writer.write_bundle(Path(sys.argv[1]), sys.argv[2], {"manifest.json": "{}"}, force=True)
"""


def test_a_bundle_parked_by_a_killed_run_is_restored_not_deleted(tmp_path):
    out = tmp_path / "out"
    _bundle(out / "b")
    before = tree(out / "b")
    proc = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(out), "b"], cwd=REPO, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    parked = [p.name for p in out.iterdir() if ".old-" in p.name]
    assert not (out / "b").exists() and len(parked) == 1, "the state a kill leaves: the name empty"
    notes: list[str] = []
    with pytest.raises(WriteError, match="already exists"):
        write_bundle(out, "b", NEW, note=notes.append)  # without --force: restored, then refused as usual
    assert tree(out / "b") == before
    assert notes and f"restored {out / 'b'}" in notes[0] and parked[0] in notes[0]
    write_bundle(out, "b", NEW, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["b"]


def test_a_parked_folder_fp8spec_did_not_write_is_never_deleted(tmp_path):
    """An older fp8spec parked whatever --force replaced; what is not a bundle of ours stays."""
    out = tmp_path / "out"
    _bundle(out / "b")
    parked = out / f".b.old-{'0' * 16}"
    _user_folder(parked)
    write_bundle(out, "b", NEW, force=True)
    assert (parked / "notes.txt").read_text() == "three weeks of notes\n"
    ours = out / f".b.old-{'1' * 16}"
    _bundle(tmp_path / "other" / "b")
    os.rename(tmp_path / "other" / "b", ours)
    write_bundle(out, "b", NEW, force=True)
    assert not ours.exists() and parked.exists()


# --- the command line -----------------------------------------------------------------------------------


def _spec(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml(patched(BASE_SPEC, changes)))
    return path


def test_cli_force_refuses_a_user_folder(tmp_path):
    """R01: a folder with the bundle's name and no manifest.json."""
    spec = _spec(tmp_path)
    _user_folder(tmp_path / "out" / "base")
    before = tree(tmp_path / "out")
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"), "--force")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.splitlines()[-1]  # after the spec's own warnings
    assert line.startswith(f"fp8spec: error: {tmp_path / 'out' / 'base'}: not replaced: it has no manifest.json")
    assert tree(tmp_path / "out") == before


def test_cli_force_refuses_the_specs_own_support_folder(tmp_path):
    """R02: a spec named after its reward folder, compiled into its own folder with --force."""
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "r.py").write_text("def compute_score(*a, **k):\n    return 0.0\n")
    (tmp_path / "rewards" / "helpers.py").write_text("x = 1\n")
    spec = _spec(tmp_path, name="rewards", reward={"custom_function": {"path": "rewards/r.py"}})
    before = tree(tmp_path)
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path), "--force")
    assert proc.returncode == 2 and "not replaced" in proc.stderr, proc.stderr
    assert tree(tmp_path) == before


def test_cli_force_replaces_its_own_bundle_until_it_is_edited(tmp_path):
    spec = _spec(tmp_path)
    out = tmp_path / "out"
    assert run_cli_here("compile", str(spec), "-o", str(out)).returncode == 0
    proc = run_cli_here("compile", str(spec), "-o", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    with open(out / "base" / "launch.sh", "a") as fh:
        fh.write("# my change\n")
    proc = run_cli_here("compile", str(spec), "-o", str(out), "--force")
    assert proc.returncode == 2 and "launch.sh was changed after fp8spec wrote it" in proc.stderr
    assert (out / "base" / "launch.sh").read_text().endswith("# my change\n")


@pytest.mark.parametrize("command", ["compile", "plan"])
@pytest.mark.parametrize("value", ["", " "])
def test_cli_empty_output_folder_is_refused(tmp_path, command, value):
    """`-o "$OUT"` with OUT unset: read as a path, '' would be the current folder."""
    spec = _spec(tmp_path)
    proc = run_cli_here(command, str(spec), "-o", value, cwd=tmp_path)
    assert proc.returncode == 2 and "names no folder" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("length", [300, 5000])  # a name over NAME_MAX (255), a path over PATH_MAX (4096)
def test_cli_output_path_too_long_is_a_located_exit_2(tmp_path, length):
    spec = _spec(tmp_path)
    out = tmp_path / ("n" * length if length < 4096 else "/".join(["n" * 200] * (length // 200)))
    proc = run_cli_here("compile", str(spec), "-o", str(out))
    last = proc.stderr.splitlines()[-1]
    assert proc.returncode == 2 and last.startswith("fp8spec: error: ") and "File name too long" in last
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_cli_output_under_an_unsearchable_folder_is_a_located_exit_2(tmp_path):
    # root searches any folder: it runs without that capability (tests/unprivileged.py), the mode binds it
    cmd = unprivileged([sys.executable, "-m", "fp8spec.cli", "compile"])
    spec = _spec(tmp_path)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o600)  # not searchable by its owner
    try:
        proc = subprocess.run([*cmd, str(spec), "-o", str(private / "out")], capture_output=True,
                              text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        last = proc.stderr.splitlines()[-1]
        assert last.startswith(f"fp8spec: error: {private / 'out'}") and "Permission denied" in last
        assert "internal error" not in proc.stderr
    finally:
        os.chmod(private, 0o700)
    assert list(private.iterdir()) == []

