"""Trainer bundles carry the memory plan: README section, and its picture as plan.svg (plain SVG text)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.compiler.golden import cases, compile_files


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_bundle_embeds_the_plan(spec_path, backend):
    files = compile_files(spec_path, backend)
    if "+" not in backend:  # a standalone serve bundle: verl's rollout defaults do not apply
        assert "plan.svg" not in files and "## Memory plan" not in files["README.md"]
        return
    readme = files["README.md"]
    assert "## Memory plan" in readme and "![KV capacity and concurrency, BF16 vs FP8](plan.svg)" in readme
    assert "available KV memory" in readme and "Trainer:" in readme
    svg = ET.fromstring(files["plan.svg"])
    assert svg.tag.endswith("svg") and len(svg.findall("{http://www.w3.org/2000/svg}polyline")) >= 3
    assert files["plan.svg"] == compile_files(spec_path, backend)["plan.svg"]
    assert '"plan.svg"' in files["manifest.json"]
