"""The built wheel carries everything fp8spec reads at run time, and works outside the source checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO, require


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    require("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("fp8spec-*.whl")
    return path


def test_wheel_contains_runtime_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("fp8spec/_data/backends/stack.yaml", "fp8spec/_data/backends/verl/0.9.1.yaml",
                     "fp8spec/_data/backends/vllm/0.33.0.yaml", "fp8spec/_data/templates/launch.sh.j2",
                     "fp8spec/_data/specs/qwen3-30b.yaml", "fp8spec/_data/specs/fp8spec.schema.json",
                     "fp8spec/data/gpus.yaml", "fp8spec/runtime/manifest.py"):
        assert required in names, required
    assert any(n.startswith("fp8spec/catalog/models/") for n in names)


def test_wheel_metadata_is_complete(wheel):
    """License (SPDX expression and the full text), the one version (fp8spec/__init__.py), typed marker."""
    from email.parser import Parser

    from fp8spec import __version__

    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())
    (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = Parser().parsestr(zf.read(meta_name).decode("utf-8"))
    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    for field in ("Summary", "Author", "Keywords", "Requires-Python"):
        assert meta[field], field
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert "fp8spec/py.typed" in names
    (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = zf.read(license_name).decode("utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert text == (REPO / "LICENSE").read_text(encoding="utf-8")


def test_one_version_literal():
    """fp8spec's version is written once (fp8spec/__init__.py): hatch reads it there and the runtime manifest
    imports it (PATCHSET_VERSION), so the bundle and the installed package cannot disagree."""
    from fp8spec import __version__

    quoted = (f'"{__version__}"', f"'{__version__}'")
    holders = [str(p.relative_to(REPO)) for p in sorted((REPO / "fp8spec").rglob("*.py"))
               if any(q in p.read_text(encoding="utf-8") for q in quoted)]
    assert holders == ["fp8spec/__init__.py"], holders
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in pyproject and 'path = "fp8spec/__init__.py"' in pyproject
    assert __version__ not in pyproject


def test_installed_wheel_compiles_outside_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=str(target))
    work = tmp_path / "elsewhere"
    work.mkdir()
    spec = target / "fp8spec" / "_data" / "specs" / "qwen3-30b.yaml"
    proc = subprocess.run([sys.executable, "-c", "import fp8spec.cli as c, sys; sys.argv=['fp8spec', *sys.argv[1:]]; "
                           "print(c.__file__, file=sys.stderr); c.main()", "compile", str(spec), "-o", "b"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert str(target) in proc.stderr, "ran the source checkout instead of the wheel"
    assert (work / "b" / "qwen3-30b-a3b-fp8-e2e" / "launch.sh").exists()


def test_wheel_registers_vllm_plugin_and_cli(wheel):
    zf = zipfile.ZipFile(wheel)
    (ep,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = zf.read(ep).decode()
    assert "[vllm.general_plugins]" in text and "fp8spec.runtime.vllm_plugin:register" in text
    assert "fp8spec = fp8spec.cli:main" in text
