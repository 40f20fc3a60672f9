"""The project speaks of itself only: no words of how, when or in which sitting it was built.

Tracked files outside benchmarks/results/ (raw logs keep what the tools printed) may not name work sittings
("session 9"), machine loans ("lease", "device time"), tries ("attempt 3", "the fourth attempt"), rounds ("round
three") or the project's own issues ("issue 23", "#23"). A reference to an UPSTREAM issue or pull request is a
fact and stays: it names its repository just before the number ("verl #7232", "vLLM PR #11906", "LMCache issue
#3430", "sglang PR #30749 / #22484").
"""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

PARALLEL_CLEANUP: tuple[re.Pattern[str], ...] = ()  # paths a change in flight cleans; empty on main

EXCLUDED = (
    re.compile(r"^benchmarks/results/"),  # raw evidence: what the tools printed
    re.compile(r"^tests/quality/test_no_work_diary\.py$"),  # this file names the words it forbids
    re.compile(r"^backends/snapshots/"),  # upstream CLI snapshots, verbatim
    re.compile(r"^tests/data/"),  # raw evidence the tests read, as the tools printed it
)

DIARY = re.compile(
    r"\bsessions? ?\d+"
    r"|\bsession\d+"
    r"|\blease[sd]?\b"
    r"|\bdevice[- ]time\b"
    r"|\battempts? ?\d+"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth) attempt\b"
    r"|\bround (?:two|three|four|five)\b",
    re.IGNORECASE,
)
ISSUE = re.compile(r"\b(?:issues?|PR|pull request)[- ]?#?\d+|(?<![\w/&#\"'])#\d+\b", re.IGNORECASE)
# an upstream repository named right before the reference (same line or the end of the line above)
UPSTREAM = re.compile(
    r"\b(?:verl|vllm|vllm-fork|sglang|sgl-cookbook|lmcache|nemo-rl|transformers|transformerengine|prime-rl|"
    r"flashinfer|deepgemm|megatron(?:-lm|-core|-bridge)?|mbridge|pytorch|torch|triton|ray|cutlass)"
    r"(?:\s+(?:issues?|PR|RFC|pull request))?\s*#?\d*(?:\s*[,/]\s*#?\d+)*\s*[,/]?\s*(?:issues?|PR)?\s*$",
    re.IGNORECASE,
)
TEXT_SUFFIXES = (".py", ".pyi", ".yaml", ".yml", ".md", ".j2", ".json", ".txt", ".toml", ".sh", ".cfg", ".ini")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [
        name
        for name in out.split()
        if name.endswith(TEXT_SUFFIXES) and not any(p.search(name) for p in (*EXCLUDED, *PARALLEL_CLEANUP))
    ]


def diary_words(text: str) -> list[tuple[int, str]]:
    """(line number, word) for every work-diary word in ``text``; upstream issue references are facts."""
    found: list[tuple[int, str]] = []
    previous = ""
    for number, line in enumerate(text.splitlines(), 1):
        found += [(number, m.group(0)) for m in DIARY.finditer(line)]
        for m in ISSUE.finditer(line):
            before = (previous.rstrip() + " " + line[: m.start()]).replace("\\", "").rstrip()
            if not UPSTREAM.search(before[-60:]):
                found.append((number, m.group(0)))
        previous = line
    return found


def test_no_work_diary_words_in_tracked_files():
    hits = []
    for name in _tracked():
        path = REPO / name
        if not path.is_file():
            continue
        hits += [f"{name}:{n}: {w}" for n, w in diary_words(path.read_text(encoding="utf-8", errors="replace"))]
    assert not hits, "work-diary words (the project speaks of itself only):\n" + "\n".join(hits)


def test_no_work_diary_words_in_file_names():
    bad = [n for n in _tracked() if re.search(r"issue\d|session\d|attempt\d|lease", n, re.IGNORECASE)]
    assert not bad, bad


def test_the_patterns_catch_the_diary_and_spare_upstream_facts():
    caught = [
        "measured in session 9",
        "the session18 logs",
        "within one lease",
        "no device time left",
        "attempt 3 stopped at init",
        "the fourth attempt",
        "round three",
        "fixed for issue 23",
        "the issue-25 cases",
        "see #23",
    ]
    for text in caught:
        assert diary_words(text), text
    spared = [
        "verl #7232 reports Qwen3-30B-A3B slower",
        "vLLM PR #11906: an FP8 KV cache",
        "LMCache issue #3430",
        "sglang PR #30749 / #22484",
        "reported: NeMo-RL PR\n#3545 (FlashInfer TRT-LLM)",
        "a Ray session folder",
        "the release notes",
        '"&#65;", "#1 leading hash", fill="#555555"',
        "verl \\#6893 (a Markdown table escapes the hash)",
        "an attempt to load the weights fails",
    ]
    for text in spared:
        assert not diary_words(text), (text, diary_words(text))
