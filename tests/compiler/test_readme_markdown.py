"""The bundle README shows every value as itself: a spec value in a code span cannot close it (the fence is longer
than any backtick run in the value), one in text cannot open emphasis, a link, HTML or a table cell, and a line
break cannot start a new block. Checked with a CommonMark reader (markdown-it-py, GitHub's tables and
strikethrough on), not by looking at the text."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8spec.quoting import md_code, md_code_cell, md_fence, md_text
from tests.cli.inprocess import run_cli_here
from tests.conftest import SPECS, require

markdown_it = require("markdown_it")
MD = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])

HOSTILE = [
    "a` **bold** [link](http://example.invalid) `b",
    "`",
    "``",
    "` x `",
    "x`",
    "`x",
    " padded ",
    "**strong** and _em_ and __init__",
    "[x](y) ![img](z) <http://a.invalid>",
    "<b>html</b> <!-- c --> &amp; &#65;",
    "a | b || c",
    "~~struck~~",
    "line\nbreak\n# heading\n- item\n> quote",
    "tab\there\r\nand CR",
    "www.example.invalid and https://example.invalid/x",
    "\\`escaped\\` \\",
    "",
    "#1 leading hash",
    "1. ordered",
]

TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


def _inline(source: str):
    """The inline tokens of a one-paragraph document."""
    tokens = [t for t in MD.parse(source) if t.type == "inline"]
    assert len(tokens) == 1, (source, [t.type for t in MD.parse(source)])
    return tokens[0].children


def _visible(text: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _check_code(text: str) -> None:
    if not text:  # CommonMark has no empty code span (spec values are never empty)
        assert md_code(text) == "` `"
        return
    children = _inline("see " + md_code(text) + " here")
    codes = [c for c in children if c.type == "code_inline"]
    assert len(codes) == 1 and codes[0].content == _visible(text), (text, md_code(text), children)
    assert [c.type for c in children] == ["text", "code_inline", "text"]


def _check_text(text: str) -> None:
    children = _inline("see " + md_text(text) + " here")
    assert {c.type for c in children} <= {"text"}, (text, md_text(text), [c.type for c in children])
    assert "".join(c.content for c in children) == "see " + _visible(text) + " here"


@pytest.mark.parametrize("text", HOSTILE)
def test_code_span_shows_exactly_the_value(text):
    _check_code(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_text_shows_exactly_the_value(text):
    _check_text(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_code_in_a_table_cell_stays_in_its_cell(text):
    table = "| a | b |\n|---|---|\n| " + md_code_cell(text) + " | after |\n"
    inlines = [t for t in MD.parse(table) if t.type == "inline"]
    assert len(inlines) == 4, table
    cell, after = inlines[2], inlines[3]
    assert [c.type for c in cell.children] == ["code_inline"]
    assert cell.children[0].content == (_visible(text) or " ")
    assert after.content == "after"


@pytest.mark.parametrize("text", [t for t in HOSTILE if "\r" not in t] + ["```\nclose\n```", "````"])
def test_fenced_block_holds_the_text(text):
    fence = md_fence(text)
    tokens = MD.parse(f"{fence}\n{text}\n{fence}\nafter\n")
    assert [t.type for t in tokens][0] == "fence" and tokens[0].content == text + "\n"


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_any_text_round_trips_as_code_and_as_text(text):
    _check_code(text)
    _check_text(text)


def test_bundle_readme_shows_hostile_spec_values_as_themselves(tmp_path):
    """A compiled README: every hostile value is one code span with exactly its text, and the README has no
    link, emphasis or HTML that a clean spec's README does not have."""
    folder = tmp_path / "s"
    (folder / "models" / "tiny-qwen3").mkdir(parents=True)
    shutil.copy(SPECS / "models" / "tiny-qwen3" / "config.json", folder / "models" / "tiny-qwen3")
    shutil.copytree(SPECS / "rewards", folder / "rewards")
    clean = (SPECS / "tiny-qwen3-h200.yaml").read_text()
    (folder / "clean.yaml").write_text(clean)
    values = {
        "path: /tmp/fp8spec-rl/model": "/models/a` **bold** [link](http://example.invalid) `b",
        "val_files: /tmp/fp8spec-rl/data/test.parquet": "/data/<b>x</b>&amp;|y|``z.parquet",
        "checkpoint_dir: /tmp/fp8spec-rl/checkpoints/tiny-qwen3-h200-fp8": "/ckpt/_em_/**s**/~~t~~/`",
    }
    hostile = clean
    for old, value in values.items():
        key = old.split(":")[0]
        assert old in hostile
        hostile = hostile.replace(old, f"{key}: '{value}'")
    hostile = hostile.replace("name: tiny-qwen3-h200-fp8", "name: hostile", 1)
    (folder / "hostile.yaml").write_text(hostile)
    kinds = {}
    for name in ("clean", "hostile"):
        proc = run_cli_here("compile", str(folder / f"{name}.yaml"), "-o", str(tmp_path / name), cwd=folder)
        assert proc.returncode == 0, proc.stderr
        (readme,) = (tmp_path / name).glob("*/README.md")
        tokens = MD.parse(readme.read_text())
        flat = [c for t in tokens for c in ([t] + list(t.children or []))]
        kinds[name] = sorted(t.type for t in flat if t.type in (
            "link_open", "image", "strong_open", "em_open", "html_inline", "html_block", "s_open", "heading_open"))
        codes = [c.content for c in flat if c.type == "code_inline"]
        if name == "hostile":
            for value in values.values():
                assert any(value in code for code in codes), (value, [c for c in codes if "/" in c][:20])
    assert kinds["hostile"] == kinds["clean"]
