"""The runtime's log lines as the report reads them (fp8spec/data/report_lines.yaml) still match what the runtime
writes: each pattern's fixed text is in the source file it names, and every patch of the manifest that logs is
covered by a line that proves it ran."""

from __future__ import annotations

import re

import pytest

from fp8spec.report.names import names
from fp8spec.runtime.manifest import PATCHES
from tests.conftest import REPO


def _fixed_head(pattern: str) -> str:
    """The pattern's text up to its first regular-expression construct, unescaped."""
    head = re.split(r"(?<!\\)[(\[?*+{.]|\\[dswDSW]", pattern, maxsplit=1)[0]
    return head.replace("\\", "")


@pytest.mark.parametrize("line", names().lines, ids=lambda p: p.name)
def test_each_line_pattern_is_in_the_runtime_source_it_names(line):
    path = REPO / line.source.split(" ")[0]
    text = path.read_text(encoding="utf-8")
    head = _fixed_head(line.regex.pattern).rstrip()
    assert len(head) >= 8 and head in text, (head, path)


def test_every_patch_is_proven_by_a_line_or_declared_silent():
    n = names()
    proven = {p.proves for p in n.lines if p.proves}
    assert set(PATCHES) == proven | n.silent_when_idle, set(PATCHES) ^ (proven | n.silent_when_idle)
