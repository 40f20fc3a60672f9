"""Relative links in README.md and docs/*.md lead somewhere: the file exists, and a #anchor is a heading of it
(GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, a repeated heading numbered)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def _prose_lines(text: str, *, drop_code_spans: bool = True) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, with inline code spans removed unless asked to keep them."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, CODE_SPAN.sub("", line) if drop_code_spans else line))
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8"), drop_code_spans=False):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(path: Path) -> list[str]:
    broken = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading #{anchor})")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    assert not broken_links(path)


def test_a_broken_file_link_and_a_broken_anchor_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "other.md").write_text(
        "# Title\n\n## Set-up: on a machine\n\n## Set-up: on a machine\n\n## `plan` output\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#set-up-on-a-machine) [ok](other.md#set-up-on-a-machine-1) [ok](other.md#plan-output)\n"
        "[web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) `[in code](missing.md)`\n"
        "```\n[in a fence](missing.md)\n```\n"
    )
    assert broken_links(page) == [
        "page.md:3: missing.md (no such file)",
        "page.md:3: other.md#nowhere (no heading #nowhere)",
    ]


def test_headings_slug_as_github_does():
    assert (
        slug("The path: plan -> compile -> launch -> report") == "the-path-plan---compile---launch---report"
    )
    assert slug("`fp8spec plan` output") == "fp8spec-plan-output"
