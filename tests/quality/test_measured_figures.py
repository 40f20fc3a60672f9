"""Measured figures live once, in fp8spec/data/measured.yaml, and docs/results.md shows each of them.

Code, rules, data files and backend profiles cite a figure as ``measured:<id>``; a citation of an id that is not
there, a figure whose anchor is not a section of docs/results.md, or a figure that section does not show (by id or
by a ``prefix.*`` pattern) fails here. The data files that compute with a figure read it through the planner's
loader, so their citations must resolve to numbers.
"""

from __future__ import annotations

import re
import subprocess

from ruamel.yaml import YAML

from fp8spec.plan import facts
from tests.conftest import REPO

MEASURED = REPO / "fp8spec" / "data" / "measured.yaml"
RESULTS = REPO / "docs" / "results.md"
FIELDS = {"value", "unit", "hardware", "date", "anchor", "command"}
CITATION = re.compile(r"measured:([a-z0-9_]+(?:\.[a-z0-9_]+)+(?:\.\*)?)")
TEXT_SUFFIXES = (".py", ".yaml", ".yml", ".md", ".j2", ".json", ".txt", ".toml")


def _figures() -> dict:
    return YAML(typ="safe").load(MEASURED.read_text(encoding="utf-8"))["figures"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def _sections() -> dict[str, str]:
    """docs/results.md's level-2 sections by anchor."""
    sections: dict[str, str] = {}
    anchor = ""
    for line in RESULTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            anchor = _slug(line[3:])
            sections[anchor] = ""
        elif anchor:
            sections[anchor] += line + "\n"
    return sections


def _citations() -> dict[str, list[str]]:
    """Every ``measured:<id>`` in a tracked text file, with the files that cite it."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    cited: dict[str, list[str]] = {}
    for name in files:
        if not name.endswith(TEXT_SUFFIXES) or name.startswith("tests/golden/"):
            continue
        path = REPO / name
        if not path.is_file():
            continue
        for fid in CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(fid, []).append(name)
    return cited


def _covers(citation: str, figures: dict) -> bool:
    """A citation names one figure, or ends in ``.*`` and covers at least one."""
    if citation.endswith(".*"):
        return any(fid.startswith(citation[:-1]) for fid in figures)
    return citation in figures


def test_every_cited_figure_exists():
    figures = _figures()
    missing = {fid: where for fid, where in _citations().items() if not _covers(fid, figures)}
    assert not missing, f"cited but not in fp8spec/data/measured.yaml: {missing}"


def test_citations_are_found_where_the_code_quotes_figures():
    # the scan must see the citations it guards, or the check above passes on nothing
    cited = _citations()
    assert "fp8spec/data/trainer_gains.yaml" in cited["trainer_layer.qwen3_30b_a3b.blockwise.t4096"]
    assert "fp8spec/specfile/model.py" in cited["sync.qwen3_30b_a3b.direct_s"]


def test_every_figure_is_complete_and_anchored_in_the_results():
    sections = _sections()
    for fid, figure in _figures().items():
        assert set(figure) == FIELDS, (fid, sorted(set(figure) ^ FIELDS))
        value = figure["value"]
        numbers = value if isinstance(value, list) else [value]
        assert numbers and all(isinstance(n, (int, float)) for n in numbers), (fid, value)
        assert figure["anchor"] in sections, f"{fid}: no section #{figure['anchor']} in docs/results.md"


def test_every_figure_is_shown_in_its_results_section():
    sections = _sections()
    for fid, figure in _figures().items():
        text = sections[figure["anchor"]]
        shown = re.findall(r"`([a-z0-9_.]+(?:\.\*)?)`", text)
        assert any(fid == s or (s.endswith(".*") and fid.startswith(s[:-1])) for s in shown), (
            f"{fid}: docs/results.md#{figure['anchor']} neither names it nor a pattern covering it"
        )


def test_data_files_read_their_figures_from_measured():
    figures = _figures()
    for e in facts.trainer_gains()["entries"]:
        assert isinstance(e["ratio"], float), e
    raw = YAML(typ="safe").load((REPO / "fp8spec/data/trainer_gains.yaml").read_text(encoding="utf-8"))
    for raw_entry, e in zip(raw["entries"], facts.trainer_gains()["entries"]):
        fid = raw_entry["ratio"].removeprefix("measured:")
        assert e["ratio"] == figures[fid]["value"]
    for e in facts.gains()["entries"]:
        assert isinstance(e["low"], float) and isinstance(e["high"], float) and e["low"] <= e["high"], e


def test_an_unknown_figure_is_named_in_the_error():
    try:
        facts.measured("sync.no_such_model.direct_s")
    except KeyError as e:
        assert "sync.no_such_model.direct_s" in str(e)
    else:
        raise AssertionError("an unknown figure id was accepted")


def test_every_raw_evidence_path_the_results_name_exists():
    text = RESULTS.read_text(encoding="utf-8")
    paths = set(re.findall(r"((?:benchmarks/results|tests/data)/[\w./*-]*[\w/*])", text))
    assert len(paths) > 10, paths  # the scan finds the paths
    missing = sorted(p for p in paths if not ((REPO / p).exists() or ("*" in p and any(REPO.glob(p)))))
    assert not missing, f"docs/results.md names raw evidence that is not there: {missing}"
