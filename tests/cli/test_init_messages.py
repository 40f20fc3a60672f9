"""What `fp8spec init` says about its changes: each field change names the rule it is for, a BF16 KV cache keeps no
FP8 scale setting, and the closing line points at what was actually shown."""

from __future__ import annotations

import pytest

from fp8spec.starter import starter_spec
from tests.cli.inprocess import run_cli_here

# models without QK-norm: KV008 turns the template's FP8 KV cache to BF16
NO_QK_NORM = [("meta-llama/Llama-3.1-8B", "h100"), ("meta-llama/Llama-3.1-8B", "h200"), ("Qwen/Qwen2.5-7B", "l40s")]


@pytest.mark.parametrize("model,gpu", NO_QK_NORM)
def test_a_bf16_kv_cache_keeps_no_recalibration(model, gpu, tmp_path):
    result = starter_spec("dense-vllm", model, gpu, None, 8, file=str(tmp_path / "s.yaml"), spec_dir=tmp_path)
    spec = result.validation.loaded.spec
    assert spec.kv_cache.dtype == "bf16", result.changes
    assert spec.kv_cache.recalibrate == "none" and "per_step" not in result.text.split("kv_cache:")[1][:80]


@pytest.mark.parametrize("model,gpu", NO_QK_NORM)
def test_a_concurrency_cap_is_labelled_with_the_rule_it_serves(model, gpu, tmp_path):
    result = starter_spec("dense-vllm", model, gpu, None, 8, file=str(tmp_path / "s.yaml"), spec_dir=tmp_path)
    capped = [c for c in result.changes if c.startswith("rollout.max_num_seqs")]
    assert capped, result.changes
    assert all(c.split("(", 1)[1].startswith("MEM004") for c in capped), capped
    assert all("concurrency" in c and "est. rollout throughput" in c for c in capped), capped


def test_the_closing_line_does_not_point_at_quotes_that_are_not_there(tmp_path):
    # the MoE template on its default hardware stops at TRN007, a warning said once as a note and not quoted
    out = run_cli_here("init", "--template", "moe-megatron", "-o", str(tmp_path / "s.yaml"), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    quoted = any(line.startswith("    ") and " | " in line for line in out.stderr.splitlines())
    assert quoted or "quoted above" not in out.stderr, out.stderr
    assert not quoted and "(the notes above say why)" in out.stderr, out.stderr
