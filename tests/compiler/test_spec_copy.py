"""The bundle ships the spec it was compiled from, byte for byte, and its manifest names it by sha256."""

from __future__ import annotations

import hashlib
import json

from tests.conftest import BASE_SPEC, dump_yaml
from tests.launchers.conftest import compile_bundle


def test_the_bundle_holds_the_spec_byte_for_byte(tmp_path):
    # comments, CRLF line ends, non-ASCII text and a trailing blank line: nothing of it may be normalised
    text = "# our run: Grüße\r\n" + dump_yaml(BASE_SPEC).replace("\n", "\r\n") + "\r\n"
    spec = tmp_path / "mine.yaml"
    spec.write_bytes(text.encode("utf-8"))
    for backend in (None, "vllm"):  # a training bundle and a serve bundle
        bundle = compile_bundle(spec, tmp_path / f"out-{backend}", backend)
        shipped = (bundle / "spec.yaml").read_bytes()
        assert shipped == spec.read_bytes()
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["spec"]["sha256"] == hashlib.sha256(shipped).hexdigest() == manifest["files"]["spec.yaml"]
        assert "shipped here byte for byte as `spec.yaml`" in (bundle / "README.md").read_text()
