"""Golden bundles are reproduced byte for byte (see golden.py for regeneration)."""

from __future__ import annotations

import pytest

from tests.compiler.golden import GOLDEN, REGEN, cases, compile_files

# Copied verbatim into every trainer bundle: pinned once against its source instead of once per golden
# folder (its bytes still count through each golden manifest.json's sha256).
VERBATIM = {"preflight.py"}


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_golden_bundle(spec_path, backend):
    files = compile_files(spec_path, backend)
    verbatim = {name: files.pop(name) for name in VERBATIM & set(files)}
    if verbatim:
        from fp8spec.preflight import program_text

        assert verbatim["preflight.py"] == program_text()
    # the runtime patch set a bundle ships in lib/: the package's own files, verbatim (pinned the same way)
    shipped = {name[len("lib/"):]: files.pop(name) for name in sorted(files) if name.startswith("lib/")}
    if shipped:
        from fp8spec.patchset import shipped_files

        assert shipped == shipped_files()
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


def test_compile_is_deterministic():
    spec_path, backend = cases()[0]
    assert compile_files(spec_path, backend) == compile_files(spec_path, backend)
