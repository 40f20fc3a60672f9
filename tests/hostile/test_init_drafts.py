"""``fp8spec init`` on a draft that is not a well-formed spec (a value from the command line or from config.json
that the schema refuses): the draft's located schema errors and exit 1, never a crash."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import SPECS


def _model_folder(tmp_path, name="tiny", **config_changes):
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((SPECS / "models" / "tiny-qwen3" / "config.json").read_text())
    config.update(config_changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


CASES = {
    "model-interpolation": (lambda t: _model_folder(t), ["--model", "org/x${y}"], "model.name"),
    "model-control-char": (lambda t: _model_folder(t), ["--model", "org/x\x01y"], "model.name"),
    "config-name-interpolation": (lambda t: _model_folder(t, _name_or_path="org/m${x}"), [], "model.name"),
    "config-name-bidi": (lambda t: _model_folder(t, _name_or_path="org/m\u202ex"), [], "model.name"),
    "folder-interpolation": (lambda t: _model_folder(t, name="m${x}"), [], "model.path"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_draft_schema_error_is_located_exit_1(tmp_path, case):
    make, extra, field = CASES[case]
    folder = make(tmp_path)
    proc = run_cli_here("init", "--config-path", str(folder), "--gpu", "h200", "--gpus-per-node", "1", *extra,
                        cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert any(ln.startswith("draft:") and " error S0" in ln and field in ln for ln in proc.stderr.splitlines()), \
        proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith("init: no dense-vllm spec validates clean")
    assert proc.stdout == ""


@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8 needs a byte-name file system")
def test_config_path_in_a_folder_whose_name_is_not_utf8(tmp_path):
    folder = os.fsencode(tmp_path) + b"/bad\xffdir"
    os.mkdir(folder)
    shutil.copy(SPECS / "models" / "tiny-qwen3" / "config.json", os.fsdecode(folder))
    proc = run_cli_here("init", "--config-path", os.fsdecode(folder), "--gpu", "h200", "--gpus-per-node", "1",
                        cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "internal error" not in proc.stderr
    assert any(ln.startswith("draft:") and "model.config_path" in ln for ln in proc.stderr.splitlines())
