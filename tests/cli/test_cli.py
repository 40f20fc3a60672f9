"""The command line: example specs validate clean, JSON output, exit codes, schema and rule docs."""

from __future__ import annotations

import json

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, EXAMPLE_SPECS, REPO, patched, require


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=lambda p: p.name)
def test_example_specs_validate_clean(spec):
    proc = run_cli_here("validate", "--strict", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 errors, 0 warnings" in proc.stdout


def test_example_specs_cover_the_paper_runs():
    from fp8spec.specfile.loader import load_spec

    specs = [load_spec(p).spec for p in EXAMPLE_SPECS]
    assert any(s.training.backend == "fsdp" and s.kv_cache.dtype == "fp8_e4m3" and s.correction.method == "tis"
               and "Qwen3-8B" in s.model.name for s in specs)
    assert any(s.training.backend == "megatron" and s.training.precision == "fp8"
               and s.training.fp8_recipe == "hybrid" and "30B-A3B" in s.model.name for s in specs)
    assert any(s.rollout.engine == "sglang" for s in specs)
    for path in EXAMPLE_SPECS:
        assert path.read_text().startswith("# yaml-language-server: $schema=./fp8spec.schema.json\n")


def test_json_format_many_files(write_spec):
    bad = write_spec(patched(BASE_SPEC, {"rollout": {"tp": 3}}), "bad.yaml")
    proc = run_cli_here("validate", "--format", "json", str(EXAMPLE_SPECS[0]), str(bad))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    files = {f["file"]: f for f in data["files"]}
    assert files[str(EXAMPLE_SPECS[0])]["errors"] == 0
    diag = files[str(bad)]["diagnostics"]
    assert any(d["code"] == "PAR002" and d["line"] > 1 and d["hint"] for d in diag)


def test_warnings_pass_unless_strict(write_spec):
    path = write_spec(patched(BASE_SPEC, {"training": {"parallel": {"tp": 2}}}))  # PAR007 warning
    assert run_cli_here("validate", str(path)).returncode == 0
    assert run_cli_here("validate", "--strict", str(path)).returncode == 1


def test_schema_file_is_current(tmp_path):
    out = tmp_path / "schema.json"
    assert run_cli_here("schema", "-o", str(out)).returncode == 0
    assert out.read_text() == (REPO / "specs" / "fp8spec.schema.json").read_text(), \
        "regenerate with: fp8spec schema -o specs/fp8spec.schema.json"


def test_schema_validates_examples_and_rejects_bad():
    jsonschema = require("jsonschema")
    from ruamel.yaml import YAML

    schema = json.loads((REPO / "specs" / "fp8spec.schema.json").read_text())
    for path in EXAMPLE_SPECS:
        jsonschema.validate(YAML(typ="safe").load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(patched(BASE_SPEC, {"rollout": {"tpp": 2}}), schema)


def test_rules_list_and_explain():
    proc = run_cli_here("rules")
    assert proc.returncode == 0 and "BLK001" in proc.stdout and "KV002" in proc.stdout
    proc = run_cli_here("rules", "blk001")
    assert proc.returncode == 0 and "Why:" in proc.stdout and "Fix:" in proc.stdout and "192" in proc.stdout


def test_models_lists_catalog():
    proc = run_cli_here("models")
    assert proc.returncode == 0 and "Qwen/Qwen3-30B-A3B-Base" in proc.stdout and "deepseek-ai/DeepSeek-V3" in proc.stdout


COMMANDS = ("validate", "schema", "rules", "compile", "explain", "diff", "plan", "models", "init", "backends check")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_renders_flags_as_flags(command):
    """The reported case: `--strict <bool>` read as an option taking a value."""
    import re

    proc = run_cli_here(*command.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    assert "<bool>" not in proc.stdout and "BOOLEAN" not in proc.stdout
    for flag in ("--help", "--strict", "--force", "--failures-only"):
        for line in proc.stdout.splitlines():
            if line.strip().startswith(flag + " ") or line.strip() == flag:
                assert re.match(rf"^\s+{flag}(\s{{2,}}\S|$)", line), line


def test_strict_value_is_explained():
    proc = run_cli_here("validate", str(EXAMPLE_SPECS[0]), "--strict", "true")
    assert proc.returncode == 2
    assert "hint: --strict is a flag and takes no value: drop 'true'" in proc.stdout


def test_shell_completion_is_on():
    import os
    import subprocess
    import sys

    def complete(words: str) -> list[str]:
        env = dict(os.environ, _FP8SPEC_COMPLETE="complete_bash", COMP_WORDS=words,
                   COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
        proc = subprocess.run([sys.executable, "-m", "fp8spec.cli"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert complete("fp8spec compile spec.yaml --backend meg") == ["megatron+vllm", "megatron+sglang"]
    assert "init" in complete("fp8spec in")
    assert complete("fp8spec init --template moe") == ["moe-megatron"]
    assert complete("fp8spec rules HW00") == ["HW001", "HW002", "HW003", "HW004", "HW005", "HW006"]
    assert "--install-completion" in run_cli_here("--help").stdout


def test_validate_retargets_with_backend():
    spec = str(REPO / "specs" / "qwen3-30b.yaml")
    proc = run_cli_here("validate", spec, "--backend", "fsdp+vllm")
    assert proc.returncode == 1 and " error TRN001 " in proc.stdout
    assert proc.stdout.rstrip().endswith("(retargeted from megatron+vllm to fsdp+vllm (training.backend megatron "
                                         "-> fsdp): every rule checked the spec as if it said so)")
    data = json.loads(run_cli_here("validate", spec, "-b", "megatron+sglang", "-f", "json").stdout)
    (entry,) = data["files"]
    assert entry["backend"] == "megatron+sglang" and entry["errors"] == 0
    assert entry["retargeted"].startswith("retargeted from megatron+vllm to megatron+sglang")
    assert run_cli_here("validate", spec, "-b", "tpu+jax").returncode == 2


def test_plan_retargets_with_backend():
    proc = run_cli_here("plan", str(REPO / "specs" / "qwen3-8b.yaml"), "--backend", "megatron+vllm")
    assert proc.returncode == 1, proc.stderr  # Megatron keeps more beside the engine than the spec's 0.6 leaves
    assert "retargeted from fsdp+vllm to megatron+vllm" in proc.stderr and " error MEM003 " in proc.stderr
    assert "Trainer: megatron (world 8" in proc.stdout
