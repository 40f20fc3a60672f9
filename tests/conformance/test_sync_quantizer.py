"""linear.sync_quantizer: which kernel re-quantizes the weights at each sync, per stack.

auto turns the fast_block_quant runtime patch on only where it was run in the real engine and shown byte-exact
against a fresh engine loaded from the reference quantization (vLLM 0.24.0, docs/results.md#weight-sync; SGLang 0.5.12,
docs/results.md#weight-sync, both under verl 0.9.1); the examples on the default stack get it. The direct_sync patch instead
where the profile records it byte-exact at that rollout tp and trained inside a loop with that trainer on that
kind of model (vLLM 0.24.0: tp 1, FSDP, dense; docs/results.md#weight-sync).
"""

from __future__ import annotations

import pytest

from tests.conformance.checks import check_bundle, compile_variant
from tests.conftest import SPECS


@pytest.mark.parametrize("spec,backend", [("qwen3-8b.yaml", "fsdp+vllm"), ("qwen3-30b.yaml", "megatron+vllm")])
def test_examples_on_the_default_stack_use_the_fast_quantizer(spec, backend, tmp_path):
    c = compile_variant(SPECS / spec, backend, {}, tmp_path, "default")
    assert check_bundle(c) == []
    assert "fast_block_quant" in c.plan.patches
    assert "fast_block_quant" in c.env["FP8SPEC_RUNTIME_PATCHES"].split(",")


def test_auto_keeps_verl_where_the_patch_was_not_run_in_the_engine(tmp_path):
    for patch in ({"stack": {"vllm": "0.33.0"}}, {"rollout": {"engine": "sglang"}, "stack": {"sglang": "0.5.23"}}):
        c = compile_variant(SPECS / "qwen3-30b.yaml", None, patch, tmp_path, str(sorted(patch)))
        assert "fast_block_quant" not in c.plan.patches, patch


def test_auto_waits_for_a_run_inside_the_loop_on_sglang(tmp_path, monkeypatch):
    # SGLang 0.5.12: byte-exact in the engine (docs/results.md#weight-sync), not yet run inside an RL loop -> verl's quantizer;
    # the same spec gets the patch in every Ray worker (SGLang quantizes on the trainer's side) once the loop has run
    c = compile_variant(SPECS / "qwen3-30b-sglang.yaml", "megatron+sglang", {}, tmp_path, "sglang-auto")
    assert check_bundle(c) == []
    assert "fast_block_quant" not in c.plan.patches
    from fp8spec.resolve.context import ResolvedSpec

    real = ResolvedSpec.fact
    monkeypatch.setattr(ResolvedSpec, "fact", lambda self, kind, fid, default=None: True
                        if fid == "verified.fast_block_quant_in_loop" else real(self, kind, fid, default))
    ran = compile_variant(SPECS / "qwen3-30b-sglang.yaml", "megatron+sglang", {}, tmp_path, "sglang-ran")
    assert check_bundle(ran) == []
    assert "fast_block_quant" in ran.env["FP8SPEC_RUNTIME_PATCHES"].split(",")


def test_explicit_choices_win(tmp_path):
    verl = compile_variant(SPECS / "qwen3-30b.yaml", "megatron+vllm", {"linear": {"sync_quantizer": "verl"}},
                           tmp_path, "verl")
    assert "fast_block_quant" not in verl.plan.patches
    ours = compile_variant(SPECS / "qwen3-30b.yaml", None,
                           {"rollout": {"engine": "sglang"}, "linear": {"sync_quantizer": "fp8spec"}}, tmp_path, "sg")
    assert check_bundle(ours) == []
    assert "fast_block_quant" in ours.plan.patches


def test_no_quantizer_without_fp8_linears(tmp_path):
    c = compile_variant(SPECS / "qwen3-8b.yaml", "fsdp+vllm", {"linear": {"quantize": False}}, tmp_path, "bf16")
    assert "fast_block_quant" not in c.plan.patches


def test_direct_compiles_to_the_direct_sync_patch(tmp_path):
    ack = {"linear": {"sync_quantizer": "direct"}, "acknowledge": {"BLK006": "device run measuring direct_sync"}}
    c = compile_variant(SPECS / "qwen3-8b.yaml", "fsdp+vllm", ack, tmp_path, "direct")
    assert check_bundle(c) == []
    assert "direct_sync" in c.plan.patches and "fast_block_quant" not in c.plan.patches
    assert "direct_sync" in c.env["FP8SPEC_RUNTIME_PATCHES"].split(",")


def test_auto_picks_direct_only_where_it_was_shown(tmp_path, monkeypatch):
    # vLLM 0.24.0 records the direct path byte-exact at tp 1 and trained in a loop with an FSDP trainer on a dense
    # model (verified.direct_sync_in_loop: fsdp/dense, fsdp/moe): the tiny dense FSDP spec at tp 1 gets it, and
    # so does an MoE on an FSDP trainer at tp 1
    tiny = SPECS / "tiny-qwen3-h200.yaml"
    for name, spec, backend, patch in (
        ("tiny", "tiny-qwen3-h200.yaml", None, {}),
        # one GPU per replica holds the whole BF16 model: the share FSDP leaves room for, not Megatron's 0.42
        ("fsdp-moe", "qwen3-30b.yaml", "fsdp+vllm", {"rollout": {"tp": 1, "gpu_memory_utilization": 0.5},
                                                     "training": {"precision": "bf16"}}),
    ):
        c = compile_variant(SPECS / spec, backend, patch, tmp_path, name)
        assert check_bundle(c) == []
        assert "direct_sync" in c.plan.patches and "fast_block_quant" not in c.plan.patches, name
    # not shown: rollout tp 2, ue8m0 scales, a Megatron trainer (dense or MoE) -> fast_block_quant (or verl's
    # quantizer where that was not shown either)
    for name, spec, backend, patch in (
        ("tp2", "qwen3-8b.yaml", "fsdp+vllm", {}),
        ("ue8m0", "tiny-qwen3-h200.yaml", None, {"linear": {"scale_dtype": "ue8m0"}}),
        # at Megatron's share one GPU's KV room holds a request of prompt + response, not the model's 32,768
        ("megatron-moe", "qwen3-30b.yaml", "megatron+vllm", {"rollout": {"tp": 1, "max_model_len": 22528}}),
        ("megatron", "tiny-qwen3-moe-megatron-fp8-rollout.yaml", None, {}),
    ):
        got = compile_variant(SPECS / spec, backend, patch, tmp_path, name)
        assert "direct_sync" not in got.plan.patches, name
    # the fact decides: without the loop entry the same tiny spec keeps fast_block_quant
    from fp8spec.resolve.context import ResolvedSpec

    real = ResolvedSpec.fact
    monkeypatch.setattr(ResolvedSpec, "fact", lambda self, kind, fid, default=None: []
                        if fid == "verified.direct_sync_in_loop" else real(self, kind, fid, default))
    kept = compile_variant(tiny, None, {}, tmp_path, "tiny-no-loop")
    assert "fast_block_quant" in kept.plan.patches and "direct_sync" not in kept.plan.patches


def test_the_device_plans_direct_run_compiles(tmp_path):
    # benchmarks/weight_sync/README.md runs this spec's bundle for timing_s/update_weights with the direct path on
    from tests.conftest import REPO

    for name in ("tiny-qwen3-h200-direct", "tiny-qwen3-moe-h200-direct"):  # dense and the MoE (8.9)
        c = compile_variant(REPO / "benchmarks" / "weight_sync" / f"{name}.yaml", None, {}, tmp_path, name)
        assert check_bundle(c) == []
        assert c.env["FP8SPEC_RUNTIME_PATCHES"].split(",") == ["direct_sync", "kv_scales", "replay_poll"], name
    # the Megatron twin (a Megatron trainer with direct in main_ppo has not run): direct asked for
    # explicitly, next to the Megatron / TransformerEngine compatibility patches
    c = compile_variant(REPO / "benchmarks" / "weight_sync" / "tiny-qwen3-moe-megatron-direct.yaml", None, {},
                        tmp_path, "megatron-direct")
    assert check_bundle(c) == [] and c.spec.training.backend == "megatron"
    assert c.env["FP8SPEC_RUNTIME_PATCHES"].split(",")[:2] == ["direct_sync", "kv_scales"]


def test_the_device_plans_sglang_in_loop_run_compiles(tmp_path):
    # benchmarks/sglang/README.md trains this bundle to show fast_block_quant inside an SGLang RL loop
    from tests.conftest import REPO

    c = compile_variant(REPO / "benchmarks" / "sglang" / "tiny-qwen3-h200-sglang-fp8q.yaml", None, {}, tmp_path)
    assert check_bundle(c) == []
    assert c.env["FP8SPEC_RUNTIME_PATCHES"].split(",") == ["fast_block_quant", "replay_poll"]
