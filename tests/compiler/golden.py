"""Golden bundles: every example spec compiled for every backend it is valid for, pinned byte for byte.

Regenerate after an intended change:  FP8SPEC_REGEN_GOLDEN=1 pytest tests/compiler/test_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import EXAMPLE_SPECS, REPO

GOLDEN = REPO / "tests" / "golden"
REGEN = os.environ.get("FP8SPEC_REGEN_GOLDEN") == "1"
# CI compares with what is committed; it never rewrites the goldens (a regenerating run cannot fail).
if REGEN and os.environ.get("CI"):
    raise RuntimeError("FP8SPEC_REGEN_GOLDEN=1 is refused when CI is set: regenerate locally and commit the diff")


def cases() -> list[tuple[Path, str]]:
    from fp8spec.specfile.loader import load_spec

    out = []
    for path in EXAMPLE_SPECS:
        spec = load_spec(path).spec
        out.append((path, f"{spec.training.backend}+{spec.rollout.engine}"))
        out.append((path, spec.rollout.engine))
    return out


def compile_files(spec_path: Path, backend: str) -> dict[str, str]:
    """Compile in memory exactly as `fp8spec compile` does (spec named relative to the repo)."""
    from fp8spec.compiler.build import build_plan, validate_for
    from fp8spec.compiler.bundle import bundle_files

    rel = str(spec_path.relative_to(REPO))
    validation, choice = validate_for(spec_path, rel, backend)  # retargeted when backend is not the spec's
    assert not validation.errors, [d.render() for d in validation.errors]
    valid = validation.valid()
    return bundle_files(valid, choice, build_plan(valid, choice), rel)
