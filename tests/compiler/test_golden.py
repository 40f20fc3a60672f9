"""Golden bundles are reproduced byte for byte (see golden.py for regeneration)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.compiler.golden import GOLDEN, REGEN, cases, compile_files
from tests.conftest import REPO

VERBATIM = {"preflight.py"}


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_golden_bundle(spec_path, backend):
    files = compile_files(spec_path, backend)
    # preflight.py and the runtime patch set in lib/ are the package's own files, copied into every trainer
    # bundle: they are pinned by sha256 through each golden manifest.json (compared below) instead of one
    # copy per golden folder
    verbatim = {name: files.pop(name) for name in sorted(files) if name in VERBATIM or name.startswith("lib/")}
    folder = GOLDEN / spec_path.stem / backend.replace("+", "_")
    if REGEN:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()}
    assert sorted(on_disk) == sorted(files)
    for name, text in files.items():
        assert on_disk[name] == text, f"{folder / name} differs; regenerate if intended (see golden.py)"
    pinned = json.loads(on_disk["manifest.json"])["files"]
    for name, text in verbatim.items():
        assert pinned[name] == hashlib.sha256(text.encode("utf-8")).hexdigest(), f"{name} differs from the golden"


def test_compile_is_deterministic():
    spec_path, backend = cases()[0]
    assert compile_files(spec_path, backend) == compile_files(spec_path, backend)


def test_regeneration_is_refused_under_ci():
    """With CI set, FP8SPEC_REGEN_GOLDEN=1 stops the golden tests instead of rewriting what they compare."""
    env = {**os.environ, "CI": "true", "FP8SPEC_REGEN_GOLDEN": "1"}
    proc = subprocess.run([sys.executable, "-c", "import tests.compiler.golden"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "refused when CI is set" in proc.stderr, proc.stderr


@pytest.mark.parametrize("spec_name,backend", [("qwen3-30b.yaml", "megatron+vllm"), ("qwen3-8b.yaml", "vllm")])
def test_compile_is_the_same_in_processes_with_different_hash_seeds(tmp_path, spec_name, backend):
    """Two fresh processes with different PYTHONHASHSEED (set and dict order of str keys differ) write the
    same bundle byte for byte."""
    bundles = []
    for seed in ("1", "2"):
        out = tmp_path / f"seed{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-m", "fp8spec.cli", "compile", str(REPO / "specs" / spec_name),
                               "--backend", backend, "-o", str(out)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        bundles.append({str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert bundles[0].keys() == bundles[1].keys() and len(bundles[0]) >= 4
    differ = [name for name in bundles[0] if bundles[0][name] != bundles[1][name]]
    assert not differ, differ
