"""Adding a launcher is its row in the table, one module and one template.

A copy of the package gets its row at the end of the table (fp8spec/launchers/__init__.py),
fp8spec/launchers/local.py (how it renders, what the bundle README says of it) and templates/local.sh.j2, nothing
else. The real CLI, run from the copy, then offers ``cluster.launcher: local``, writes local.sh (executable) into
every trainer bundle, and the bundle README lists it and says how to run it when the spec names it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import SPECS
from tests.extending import cli_in, copy_of_the_package

pytestmark = pytest.mark.slow

MODULE = '''"""A launcher that exists only in a test: a one-node Ray head on this machine."""

from __future__ import annotations

from fp8spec.launchers import get_launcher
from fp8spec.launchers.launch import Launch

LAUNCHER = get_launcher("local")


def render(launch: Launch) -> str:
    from fp8spec.compiler.templates import render as render_template

    return render_template(LAUNCHER.template, **launch.common)


def readme(launch: Launch) -> str:
    return f"a Ray head on this machine, the preflight, then `bash launch.sh` ({launch.common['nodes']} node)"
'''
ROW = """

LAUNCHERS += (
    Launcher(
        name="local",
        file="local.sh",
        template="local.sh.j2",
        run="run `bash local.sh` on the GPU machine",
        summary="local.sh",
    ),
)
"""
TEMPLATE = """#!/usr/bin/env bash
# {{ spec.name }} ({{ backend }}), submission {{ submission_id | sh }}
set -euo pipefail
ray start --head
python3 preflight.py --local
bash launch.sh
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = copy_of_the_package(tmp_path_factory.mktemp("with-local"))
    with open(root / "fp8spec" / "launchers" / "__init__.py", "a", encoding="utf-8") as fh:
        fh.write(ROW)
    (root / "fp8spec" / "launchers" / "local.py").write_text(MODULE, encoding="utf-8")
    (root / "templates" / "local.sh.j2").write_text(TEMPLATE, encoding="utf-8")
    return root


def test_the_spec_offers_it(tree):
    schema = json.loads(cli_in(tree, "schema").stdout)
    field = schema["$defs"]["ClusterSection"]["properties"]["launcher"]
    assert field["enum"] == ["ray", "slurm", "kuberay", "local"]
    assert "local (local.sh); all four are generated" in field["description"]


def test_every_trainer_bundle_gets_it_and_the_readme_says_how_to_run_it(tree, tmp_path):
    spec = tmp_path / "local.yaml"
    data = YAML(typ="safe").load((SPECS / "tiny-qwen3-h200-bf16.yaml").read_text(encoding="utf-8"))
    data["cluster"]["launcher"] = "local"
    data["model"]["config_path"] = str(SPECS / data["model"]["config_path"])
    data["reward"]["custom_function"]["path"] = str(SPECS / data["reward"]["custom_function"]["path"])
    with open(spec, "w", encoding="utf-8") as fh:
        YAML().dump(data, fh)
    proc = cli_in(tree, "compile", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundle = tmp_path / "out" / data["name"]
    script = (bundle / "local.sh").read_text(encoding="utf-8")
    assert script.startswith("#!/usr/bin/env bash\n# tiny-qwen3-h200-bf16 (fsdp+vllm), submission ")
    assert os.access(bundle / "local.sh", os.X_OK)
    readme = (bundle / "README.md").read_text(encoding="utf-8")
    assert "(it names `local`: run `bash local.sh` on the GPU machine)" in readme
    assert "  - `rayjob.yaml`: " in readme and readme.count("  - `local.sh`: a Ray head on this machine") == 1
    assert "local.sh" in json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))["files"]
