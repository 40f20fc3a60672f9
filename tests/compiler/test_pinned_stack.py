"""The bundle README's pinned stack names every package the run needs, the Megatron trainer's bridge included."""

from __future__ import annotations

from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO


def _readme(tmp_path, spec: str) -> str:
    proc = run_cli_here("compile", str(REPO / "specs" / spec), "-o", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    (readme,) = (tmp_path / "b").glob("*/README.md")
    return readme.read_text(encoding="utf-8").split("Pinned stack", 1)[1].split("##", 1)[0]


def test_a_megatron_bundle_names_its_bridge(tmp_path):
    stack = _readme(tmp_path, "tiny-qwen3-moe-megatron-fp8.yaml")
    assert "- megatron_core " in stack and "- mbridge >=0.15.1 (training.bridge mbridge" in stack


def test_an_fsdp_bundle_names_no_bridge(tmp_path):
    assert "bridge" not in _readme(tmp_path, "tiny-qwen3-h200.yaml")
