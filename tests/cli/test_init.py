"""`fp8spec init`: a commented starter spec that validates clean as written, or nothing at all."""

from __future__ import annotations

import pytest

from fp8spec.rules.runner import validate_path
from fp8spec.specfile.loader import load_spec
from tests.specfile.test_bad_inputs import run_cli

# (template, model, gpu, nodes, gpus per node): the templates' defaults and hardware they were not written for
CASES = [
    ("dense-vllm", None, None, None, 8),
    ("moe-megatron", None, None, None, 8),
    ("sglang", None, None, None, 8),
    ("dense-vllm", "meta-llama/Llama-3.1-8B-Instruct", "h200", 2, 8),
    ("dense-vllm", "Qwen/Qwen2.5-7B", "b200", 1, 4),
    ("dense-vllm", "Qwen/Qwen3-8B", "l40s", 1, 8),
    ("moe-megatron", "Qwen/Qwen3-30B-A3B", "h200", 1, 8),
    ("moe-megatron", "Qwen/Qwen3-30B-A3B-Base", "b200", 4, 8),
    ("sglang", "Qwen/Qwen3-30B-A3B", "h100", 2, 8),
    ("sglang", "meta-llama/Llama-3.1-8B", "gb200", 1, 4),
]


def _args(template, model, gpu, nodes, gpn) -> list[str]:
    args = ["init", "--template", template, "--gpus-per-node", str(gpn)]
    args += ["--model", model] if model else []
    args += ["--gpu", gpu] if gpu else []
    args += ["--nodes", str(nodes)] if nodes else []
    return args


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c if x))
def test_init_output_validates_clean(case, tmp_path):
    from fp8spec.starter import DEFAULTS, starter_spec

    template, model, gpu, nodes, gpn = case
    out = tmp_path / "spec.yaml"
    result = starter_spec(template, model, gpu, nodes, gpn, file=str(out), spec_dir=tmp_path)
    assert result.clean, [d.render() for d in result.validation.diagnostics]
    out.write_text(result.text, encoding="utf-8")
    validation = validate_path(out)  # the file as written, from scratch
    assert not [d for d in validation.diagnostics if d.severity != "info"], \
        [d.render() for d in validation.diagnostics]
    spec = validation.loaded.spec
    d_model, d_gpu, d_nodes = DEFAULTS[template]
    assert spec.model.name == (model or d_model) and spec.hardware.gpu == (gpu or d_gpu)
    assert (spec.hardware.nodes, spec.hardware.gpus_per_node) == (nodes or d_nodes, gpn)
    assert result.text.startswith(f"# {spec.name}: written by `fp8spec init --template {template}`.")
    assert spec.trainer.checkpoint_dir.startswith("/shared/checkpoints/") and spec.data.val_files
    backend = {"dense-vllm": "fsdp+vllm", "moe-megatron": "megatron+vllm", "sglang": "fsdp+sglang"}[template]
    assert f"{spec.training.backend}+{spec.rollout.engine}" == backend


def test_cli_init_writes_a_spec_that_validates_and_compiles(tmp_path):
    out = tmp_path / "mine.yaml"
    proc = run_cli(*_args("moe-megatron", "Qwen/Qwen3-30B-A3B-Base", "h200", 2, 8), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "# Check: fp8spec validate " in text and "parallel: {tp:" in text  # comments and layout kept
    for line in proc.stderr.splitlines():  # each change init made is reported with the rule behind it
        assert line.startswith("init: ") and "(" in line
    assert run_cli("validate", "--strict", str(out)).returncode == 0
    proc = run_cli("compile", str(out), "-o", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b" / load_spec(out).spec.name / "launch.sh").exists()


def test_cli_init_prints_to_stdout_by_default(tmp_path):
    proc = run_cli("init", "--template", "sglang", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# qwen3-8b-sglang-fp8-rollout: written by")
    assert not list(tmp_path.iterdir())


def test_cli_init_refuses_what_cannot_be_clean(tmp_path):
    out = tmp_path / "ds.yaml"
    proc = run_cli(*_args("moe-megatron", "deepseek-ai/DeepSeek-V3", "h200", 4, 8), "-o", str(out))
    assert proc.returncode == 1 and " error MEM001 " in proc.stderr and "nothing written" in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("args,text", [
    (["--model", "org/unknown"], "is not in the catalog"),
    (["--gpu", "h300"], "--gpu 'h300' is not one of"),
    (["--template", "moe-sglang"], "unknown template"),
    (["--name", "Has Space"], "--name 'Has Space'"),
])
def test_cli_init_bad_usage(args, text, tmp_path):
    out = tmp_path / "s.yaml"
    proc = run_cli("init", *args, "-o", str(out))
    assert proc.returncode == 2 and text in proc.stderr and not out.exists()


def test_cli_init_keeps_an_existing_file_without_force(tmp_path):
    out = tmp_path / "s.yaml"
    out.write_text("mine\n")
    proc = run_cli("init", "-o", str(out))
    assert proc.returncode == 2 and "--force" in proc.stderr and out.read_text() == "mine\n"
    assert run_cli("init", "-o", str(out), "--force").returncode == 0 and out.read_text().startswith("# ")


def test_init_draft_hints_propose_nothing_already_set(tmp_path):
    """The issue's case: a fresh dense-vllm draft for DeepSeek-V3 has FP8 linears; its MEM002 hint used to
    propose linear.quantize: true, which the draft already has."""
    out = tmp_path / "d.yaml"
    proc = run_cli(*_args("dense-vllm", "deepseek-ai/DeepSeek-V3", "h200", 4, 8), "-o", str(out))
    assert proc.returncode == 1 and " error MEM002 " in proc.stderr and not out.exists()
    lines = proc.stderr.splitlines()
    mem002 = next(lines[i + 1] for i, line in enumerate(lines) if " error MEM002 " in line)
    assert "hint: " in mem002
    assert "linear.quantize" not in mem002 and "quantize the linears" not in mem002
