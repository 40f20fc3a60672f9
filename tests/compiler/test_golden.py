"""Golden bundles are reproduced file for file, shipped copies pinned once (see golden.py for regeneration)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.compiler.golden import (
    GOLDEN,
    REGEN,
    SHIPPED,
    cases,
    compile_files,
    composed_changes,
    is_shipped,
    normalized,
    shipped_pins,
)
from tests.conftest import REPO, skip_missing_extra

COMPOSED = "composed.yaml"
HAVE_VERL = importlib.util.find_spec("verl") is not None and importlib.util.find_spec("hydra") is not None


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_golden_bundle(spec_path, backend):
    files = compile_files(spec_path, backend)
    shipped = {name: files.pop(name) for name in sorted(files) if is_shipped(name)}
    if shipped and not REGEN:  # pinned once for every bundle (shipped.json, rewritten by the next test)
        assert shipped_pins(shipped).items() <= json.loads(SHIPPED.read_text(encoding="utf-8")).items(), (
            "the shipped runtime or a preflight program changed; regenerate if intended (see golden.py)"
        )
    expected = normalized(files, shipped)
    if "+" in backend:
        if not HAVE_VERL:
            skip_missing_extra("verl and hydra are needed to compose the config (pip install --no-deps verl==0.9.1)")
        expected[COMPOSED] = composed_changes(files)
    folder = GOLDEN / spec_path.stem / backend.replace("+", "_")
    if REGEN:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in expected.items():
            (folder / name).write_text(text, encoding="utf-8")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir()}
    assert sorted(on_disk) == sorted(expected)
    for name, text in expected.items():
        assert on_disk[name] == text, f"{folder / name} differs; regenerate if intended (see golden.py)"


def test_shipped_pins_are_current():
    """shipped.json is what a trainer bundle ships now (regenerated with the goldens)."""
    from fp8spec.patchset import shipped_files
    from fp8spec.preflight import program_files

    shipped = {f"lib/{path}": text for path, text in shipped_files().items()}
    shipped.update(program_files())
    pins = shipped_pins(shipped)
    if REGEN:
        SHIPPED.write_text(json.dumps(pins, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert json.loads(SHIPPED.read_text(encoding="utf-8")) == pins


def test_normalizing_checks_what_it_replaces():
    """A bundle whose embedded runtime copy differs from the shipped file is refused, not hidden."""
    spec_path, backend = next(c for c in cases() if c[0].stem == "qwen3-8b" and "+" in c[1])
    files = compile_files(spec_path, backend)
    shipped = {name: files.pop(name) for name in sorted(files) if is_shipped(name)}
    (path,) = [name for name in shipped if name.endswith("runtime/log.py")]
    tampered = {**shipped, path: shipped[path] + "# changed\n"}
    for name in ("manifest.json", "preflight.json", "rayjob.yaml"):
        with pytest.raises(AssertionError):
            normalized(files if name == "manifest.json" else {name: files[name]}, tampered)


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
