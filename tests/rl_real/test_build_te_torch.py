"""benchmarks/megatron/build_te_torch.sh's control flow on CPU, with a fake ``python3`` first on PATH.

The script once ended with exit 2 and no message when its wheel folder held no wheel (``set -o pipefail`` and
``ls`` of a glob that matched nothing, inside ``$(...)``), so a fresh machine never built TransformerEngine's torch
extension. The fake records every call's arguments; for ``pip wheel`` it writes a wheel into the ``-w`` folder (or
fails, when asked), so each path of the script runs for real up to, not including, the compiler."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks/megatron/build_te_torch.sh"
WHEEL = "transformer_engine_torch-2.20.2-cp312-cp312-linux_x86_64.whl"
FAKE_PYTHON = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >> "$FAKE_LOG"
if [[ "$*" == *"pip wheel"* ]]; then
  [[ ${FAKE_PIP_RC:-0} == 0 ]] || { echo "fake pip: build failed"; exit "$FAKE_PIP_RC"; }
  while (( $# )); do [[ $1 == -w ]] && { shift; : > "$1/WHEEL_NAME"; }; shift; done
fi
exit 0
"""


@pytest.fixture
def env(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON.replace("WHEEL_NAME", WHEEL), encoding="utf-8")
    fake.chmod(0o755)
    return dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        FAKE_LOG=str(tmp_path / "calls.log"),
        TE_BUILD_DIR=str(tmp_path / "work"),
    )


def site_with_sdist(tmp_path):
    site = tmp_path / "site"
    (site / ".sdists").mkdir(parents=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = b"from setuptools import setup\n"
        info = tarfile.TarInfo("transformer_engine_torch-2.20.2/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (site / ".sdists" / "transformer_engine_torch-2.20.2.tar.gz").write_bytes(raw.getvalue())
    return site


def run(env, *args):
    return subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def calls(env) -> list[str]:
    log = env["FAKE_LOG"]
    return open(log, encoding="utf-8").read().splitlines() if os.path.exists(log) else []


def test_the_script_keeps_strict_mode_and_uses_no_ls_of_a_glob():
    text = SCRIPT.read_text(encoding="utf-8")
    assert "set -euo pipefail" in text
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "$(ls" not in code  # the pattern that ended the script silently


@pytest.mark.parametrize("wheel_dir", ["missing", "empty"])
def test_no_prebuilt_wheel_reaches_the_build_and_installs_what_it_built(tmp_path, env, wheel_dir):
    site = site_with_sdist(tmp_path)
    wheels = tmp_path / "whl"
    if wheel_dir == "empty":
        wheels.mkdir()
    proc = run(env, site, wheels)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = calls(env)
    assert any(
        "-m pip wheel" in c and "--no-index" in c and "-w " + str(tmp_path / "work/te-wheel") in c
        for c in log
    )
    assert f"built {WHEEL}" in proc.stdout
    install = [c for c in log if "zipfile" in c]
    assert len(install) == 1 and install[0].endswith(f"{tmp_path}/work/te-wheel/{WHEEL} {site}")
    assert "import transformer_engine.pytorch" in log[-1]


def test_no_wheel_folder_argument_builds_too(tmp_path, env):
    proc = run(env, site_with_sdist(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert any("-m pip wheel" in c for c in calls(env))


def test_a_prebuilt_wheel_is_installed_and_nothing_is_built(tmp_path, env):
    site = site_with_sdist(tmp_path)
    wheels = tmp_path / "whl"
    wheels.mkdir()
    (wheels / WHEEL).write_bytes(b"")
    proc = run(env, site, wheels)
    assert proc.returncode == 0, proc.stderr
    assert f"installed the prebuilt {WHEEL}" in proc.stdout
    log = calls(env)
    assert len(log) == 1 and "zipfile" in log[0] and log[0].endswith(f"{wheels / WHEEL} {site}")
    assert not (tmp_path / "work").exists()


def test_no_source_archive_and_no_wheel_exits_3_with_a_message(tmp_path, env):
    site = tmp_path / "site"
    site.mkdir()
    proc = run(env, site, tmp_path / "whl")
    assert proc.returncode == 3
    assert "no prebuilt wheel" in proc.stderr and "no source archive" in proc.stderr
    assert calls(env) == []


def test_a_failed_build_exits_5_with_a_message(tmp_path, env):
    env["FAKE_PIP_RC"] = "1"
    proc = run(env, site_with_sdist(tmp_path), tmp_path / "whl")
    assert proc.returncode == 5
    assert "pip wheel exited 1" in proc.stderr and "fake pip: build failed" in proc.stdout
    assert not any("zipfile" in c for c in calls(env))


def test_a_site_that_has_the_extension_is_left_alone(tmp_path, env):
    site = tmp_path / "site"
    (site / "transformer_engine/wheel_lib").mkdir(parents=True)
    (
        site / "transformer_engine/wheel_lib/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"
    ).write_bytes(b"")
    proc = run(env, site)
    assert proc.returncode == 0 and "already has the extension" in proc.stdout
    assert calls(env) == []


def test_build_only_leaves_the_wheel_and_installs_nothing(tmp_path, env):
    env["TE_BUILD_ONLY"] = "1"
    site = site_with_sdist(tmp_path)
    proc = run(env, site)
    assert proc.returncode == 0, proc.stderr
    assert "TE_BUILD_ONLY=1" in proc.stdout and (tmp_path / "work/te-wheel" / WHEEL).is_file()
    log = calls(env)
    assert any("-m pip wheel" in c for c in log) and not any(
        "zipfile" in c or "import transformer" in c for c in log
    )
