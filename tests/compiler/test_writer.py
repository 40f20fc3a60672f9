"""Writing is safe: atomic, --force to replace, nothing outside the output folder, errors write nothing."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from fp8spec.compiler.writer import WriteError, write_bundle
from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, EXAMPLE_SPECS, patched


def with_manifest(files: dict[str, str]) -> dict[str, str]:
    """Bundle files with the manifest fp8spec.compiler.bundle writes (the fields the writer reads)."""
    table = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(files.items())}
    manifest = json.dumps({"fp8spec_version": "0.1.0", "files": table}, indent=2, sort_keys=True) + "\n"
    return {**files, "manifest.json": manifest}


def test_write_and_force(tmp_path):
    out = tmp_path / "out"
    files = with_manifest({"a.txt": "1\n", "launch.sh": "#!/bin/sh\n"})
    target = write_bundle(out, "b", files, executable={"launch.sh"})
    assert (target / "a.txt").read_text() == "1\n"
    assert os.access(target / "launch.sh", os.X_OK) and not os.access(target / "a.txt", os.X_OK)
    with pytest.raises(WriteError, match="--force"):
        write_bundle(out, "b", with_manifest({"a.txt": "2\n"}))
    assert (target / "a.txt").read_text() == "1\n"
    write_bundle(out, "b", with_manifest({"a.txt": "2\n"}), force=True)
    assert (target / "a.txt").read_text() == "2\n" and not (target / "launch.sh").exists()
    assert sorted(p.name for p in out.iterdir()) == ["b"], "no temporary folders left behind"


@pytest.mark.parametrize("name", ["..", "a/b", ".hidden", "", "../escape"])
def test_names_that_escape_are_refused(tmp_path, name):
    with pytest.raises(WriteError):
        write_bundle(tmp_path, name, {"a": "x"})
    assert list(tmp_path.iterdir()) == []


def test_symlinked_target_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "b").symlink_to(outside)
    with pytest.raises(WriteError, match="symbolic link"):
        write_bundle(out, "b", {"a": "x"}, force=True)
    assert list(outside.iterdir()) == []


def test_bad_file_names_refused(tmp_path):
    with pytest.raises(WriteError):
        write_bundle(tmp_path, "b", {"../x": "y"})
    assert list(tmp_path.iterdir()) == []


def test_cli_compile_writes_bundle_and_refuses_overwrite(tmp_path):
    spec = EXAMPLE_SPECS[0]
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    again = run_cli_here("compile", str(spec), "-o", str(tmp_path))
    assert again.returncode == 2 and "--force" in again.stderr
    assert run_cli_here("compile", str(spec), "-o", str(tmp_path), "--force").returncode == 0


def test_cli_compile_with_errors_writes_nothing(tmp_path, write_spec):
    spec = write_spec(patched(BASE_SPEC, {"rollout": {"tp": 3}}))
    out = tmp_path / "bundles"
    proc = run_cli_here("compile", str(spec), "-o", str(out))
    assert proc.returncode == 1 and "PAR002" in proc.stderr and "nothing written" in proc.stderr
    assert not out.exists()


def test_cli_backend_retargets(tmp_path, write_spec):
    spec = write_spec(BASE_SPEC)  # fsdp + vllm
    proc = run_cli_here("compile", str(spec), "--backend", "fsdp+sglang", "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "retargeted from fsdp+vllm to fsdp+sglang (rollout.engine vllm -> sglang)" in proc.stderr
    readme = (tmp_path / "o" / "base" / "README.md").read_text()
    assert "**Retargeted**: the spec names fsdp+vllm" in readme and "`rollout.engine: sglang`" in readme
    # Megatron keeps unsharded bf16 weights and fp32 gradients beside the engine: a named rule refuses it
    proc = run_cli_here("compile", str(spec), "--backend", "megatron+vllm", "-o", str(tmp_path / "m"))
    assert proc.returncode == 1 and " error MEM003 " in proc.stderr and "retargeted from" in proc.stderr
    assert not (tmp_path / "m").exists()
    proc = run_cli_here("compile", str(spec), "--backend", "bogus", "-o", str(tmp_path / "b"))
    assert proc.returncode == 2 and "unknown backend 'bogus'" in proc.stderr and not (tmp_path / "b").exists()


def test_cli_output_is_a_file(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("x")
    proc = run_cli_here("compile", str(EXAMPLE_SPECS[0]), "-o", str(afile))
    assert proc.returncode == 2 and "not a folder" in proc.stderr
