"""A throw-away source file inside the repository, for the checks whose findings name files by repository path."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.conftest import REPO


@contextmanager
def scratch_source(tmp_path: Path, text: str) -> Iterator[Path]:
    """``text`` as a .py file under tests/quality, removed afterwards; named after the test's own tmp_path so that
    tests running at once never share it, with a leading dot so that no collector picks it up."""
    bad = tmp_path / "bad.py"
    bad.write_text(text, encoding="utf-8")
    bad = bad.rename(REPO / "tests" / "quality" / f".teeth_{tmp_path.name}.py")
    try:
        yield bad
    finally:
        bad.unlink()
