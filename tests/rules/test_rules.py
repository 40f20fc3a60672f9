"""Every rule fires on its bad example and is quiet on its good ones (the examples live beside each rule's check,
fp8spec/rules/examples.py), plus what examples cannot show: engine versions no profile lacks, acknowledgement,
hints that name values, hardware independence."""

from __future__ import annotations

import pytest

from fp8spec.rules.examples import base_spec
from fp8spec.rules.registry import all_rules, get_rule
from tests.conftest import BASE_SPEC, DEEPSEEK_E2E, MOE, patched

CODES = [r.code for r in all_rules()]


def _codes(validation, code):
    return [d for d in validation.diagnostics if d.code == code]


def _examples(code, tmp_path):
    """The rule's examples, with the files they need written beside the spec the ``validate`` fixture writes."""
    examples = get_rule(code).examples
    for name, text in examples.files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return examples


def test_every_rule_has_examples():
    missing = [r.code for r in all_rules() if r.examples is None]
    assert not missing, f"rules without a bad and a good example: {missing}"
    assert len(all_rules()) > 70  # the registry is loaded (an empty one would make the tests below vacuous)


@pytest.mark.parametrize("code", CODES)
def test_rule_fires_on_its_bad_example(code, validate, tmp_path):
    examples = _examples(code, tmp_path)
    result = validate(examples.bad_spec())
    found = _codes(result, code)
    assert found, f"{code} did not fire: {[d.render() for d in result.diagnostics]}"
    assert any(examples.message in d.message for d in found), [d.message for d in found]
    assert all(d.severity == get_rule(code).severity for d in found)
    assert all(d.line >= 1 and d.col >= 1 for d in found)


@pytest.mark.parametrize("code", CODES)
def test_rule_is_quiet_on_its_good_examples(code, validate, tmp_path):
    examples = _examples(code, tmp_path)
    for spec in examples.good_specs():
        fired = _codes(validate(spec), code)
        assert not fired, [d.render() for d in fired]


def test_the_example_base_is_clean(validate):
    """Every example is a fragment over one base spec; the base itself passes (its one warning: long responses
    on a BF16 KV cache, MEM004, whose good example shortens them)."""
    result = validate(base_spec())
    assert not result.errors, [d.render() for d in result.errors]
    assert {d.code for d in result.diagnostics} == {"MEM004"}


def test_kv002_triggers_when_patch_lacks_the_engine_version(validate, monkeypatch):
    import fp8spec.rules.kv_cache as kv

    monkeypatch.setattr(kv, "patch_supports", lambda name, engine, version: (False, ["9.9.9"]))
    result = validate(patched(BASE_SPEC, {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}))
    found = _codes(result, "KV002")
    assert found and "9.9.9" in found[0].message


def test_kv002_quiet_on_profiled_versions(validate):
    for engine, version in (("vllm", "0.24.0"), ("vllm", "0.33.0"), ("sglang", "0.5.12"), ("sglang", "0.5.23")):
        spec = patched(BASE_SPEC, {"rollout": {"engine": engine}, "stack": {engine: version},
                                   "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}})
        assert not _codes(validate(spec), "KV002"), (engine, version)


def test_blk003_fires_for_a_version_the_patch_does_not_know(validate, monkeypatch):
    from fp8spec.rules import blocks

    monkeypatch.setattr(blocks, "patch_supports", lambda name, engine, version: (False, ["9.9.9"]))
    found = _codes(validate(patched(BASE_SPEC, {"linear": {"sync_quantizer": "fp8spec"}})), "BLK003")
    assert found and "9.9.9" in found[0].message
    quiet = validate(patched(BASE_SPEC, {"linear": {"sync_quantizer": "verl"}}))
    assert not _codes(quiet, "BLK003")


def test_blk003_quiet_on_profiled_versions(validate):
    for engine, version in (("vllm", "0.24.0"), ("vllm", "0.33.0"), ("sglang", "0.5.12"), ("sglang", "0.5.23")):
        spec = patched(BASE_SPEC, {"rollout": {"engine": engine}, "stack": {engine: version},
                                   "linear": {"sync_quantizer": "fp8spec"}})
        assert not _codes(validate(spec), "BLK003"), (engine, version)


def test_blk006_refuses_direct_where_the_profile_has_not_verified_it(validate, monkeypatch):
    from fp8spec.resolve.context import ResolvedSpec

    real = ResolvedSpec.fact

    def fact(self, kind, fact_id, default=None):
        if fact_id == "verified.direct_sync_in_engine":
            return False
        return real(self, kind, fact_id, default)

    spec = patched(BASE_SPEC, {"linear": {"sync_quantizer": "direct"}, "rollout": {"tp": 1}})
    assert not _codes(validate(spec), "BLK006")  # vLLM 0.24.0 records it verified at TP1 (docs/results.md#weight-sync)
    monkeypatch.setattr(ResolvedSpec, "fact", fact)
    assert "not shown byte-exact" in _codes(validate(spec), "BLK006")[0].message
    # the other profiled vLLM has not been run
    later = validate(patched(BASE_SPEC, {"linear": {"sync_quantizer": "direct"}, "rollout": {"tp": 1},
                                         "stack": {"vllm": "0.33.0"}}))
    monkeypatch.undo()
    # the fact is the vLLM path's: SGLang stays refused whatever its profile says
    sg = validate(patched(BASE_SPEC, {"rollout": {"engine": "sglang"}, "linear": {"sync_quantizer": "direct"}}))
    assert any("vLLM's loaders only" in d.message for d in _codes(sg, "BLK006"))
    assert _codes(later, "BLK006")


def test_blk006_refuses_direct_with_ue8m0_scales(validate):
    # the direct path writes fp32 block scales; with ue8m0 the engine needs powers of two (the ue8m0_scales patch
    # rounds them in verl's quantizer, which the direct path bypasses)
    fp32 = patched(BASE_SPEC, {"linear": {"sync_quantizer": "direct"}, "rollout": {"tp": 1}})
    ue8m0 = patched(fp32, {"linear": {"scale_dtype": "ue8m0"}})
    assert not _codes(validate(fp32), "BLK006")
    found = _codes(validate(ue8m0), "BLK006")
    assert found and "writes fp32 block scales only" in found[0].message and found[0].severity == "error"


def test_acknowledged_rule_becomes_info(validate):
    spec = patched(BASE_SPEC, {"correction": {"method": "none"}, "acknowledge": {"COR001": "ablation run"}})
    found = _codes(validate(spec), "COR001")
    assert found and all(d.severity == "info" for d in found)
    assert "ablation run" in found[0].message


def test_non_acknowledgeable_rule_is_refused(validate):
    spec = patched(BASE_SPEC, {"acknowledge": {"BLK001": "because"}})
    assert any(d.code == "S005" and d.severity == "error" for d in validate(spec).diagnostics)


def test_blk001_names_working_tps(validate):
    # the spec has MEM003 and MEM006 besides: the hint promises only what it keeps (BLK001 gone, no error added)
    found = _codes(validate(patched(BASE_SPEC, MOE, {"rollout": {"tp": 4}})), "BLK001")
    assert found and all(d.hint == "set rollout.tp: 1 or 2 (each clears BLK001, adds no error)" for d in found)


def test_rules_do_not_depend_on_local_hardware(validate, monkeypatch):
    """Scale formats follow hardware.gpu, never the machine running fp8spec."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
    spec = patched(BASE_SPEC, {"hardware": {"gpu": "h100"}, "linear": {"scale_dtype": "fp32"}})
    assert not [d for d in validate(spec).diagnostics if d.code.startswith("HW")]


def test_rule_metadata_complete():
    for rule in all_rules():
        assert rule.rationale and rule.hint and rule.summary and rule.name, rule.code
        assert len(rule.rationale) > 80, rule.code


def test_config_path_replaces_catalog(validate, tmp_path):
    import json

    from fp8spec.catalog import get_model  # noqa: F401  (the catalog must hold the reference config)

    config = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 1024,
              "intermediate_size": 3072, "moe_intermediate_size": 768, "num_attention_heads": 16,
              "num_key_value_heads": 4, "head_dim": 64, "num_hidden_layers": 4, "num_experts": 8,
              "num_experts_per_tok": 2, "vocab_size": 32000, "tie_word_embeddings": False}
    path = tmp_path / "my-moe" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    spec = patched(BASE_SPEC, {"model": {"name": "my-org/my-moe", "config_path": str(path)}, "rollout": {"tp": 2}})
    result = validate(spec)
    assert not result.errors, [d.render() for d in result.errors]
    # 768 / tp 4 = 192: the same block rule now runs on the local model's shapes
    found = _codes(validate(patched(spec, {"rollout": {"tp": 4}})), "BLK001")
    assert found and "768 / tp 4 = 192" in found[0].message


def test_config_path_unusable_is_located(validate, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}')
    result = validate(patched(BASE_SPEC, {"model": {"config_path": str(bad)}}))
    found = _codes(result, "REF001")
    assert found and found[0].path == "model.config_path" and "supported" in found[0].message.lower()


def test_deepseek_v3_end_to_end_on_4x8_h200_is_refused(validate):
    """The reported case: 671B parameters trained end to end in FP8 on 32 H200s cannot hold their own state."""
    result = validate(patched(BASE_SPEC, DEEPSEEK_E2E))
    found = _codes(result, "MEM001")
    assert found and found[0].severity == "error"
    assert "trainer state per GPU is 428.7 GiB" in found[0].message
    assert "the state needs at least 90 GPUs even perfectly sharded" in found[0].message
    # the layout itself is refused (61 layers over pp 4: PAR008): memory values for it would chase its knock-ons,
    # so the hint says the layout first; the message keeps the lower bound
    assert found[0].hint.startswith("fix the layout first (PAR008)"), found[0].hint
    assert result.errors


def test_memory_hints_give_values_that_fit(validate):
    hint = _codes(validate(patched(BASE_SPEC, {"rollout": {"gpu_memory_utilization": 0.9}})), "MEM003")[0].hint
    # 0.80 would fit at zero headroom; the proposal keeps the stated 2 GiB (fp8spec/data/memory_estimates.yaml)
    assert "rollout.gpu_memory_utilization: 0.78" in hint and "training.offload.optimizer: true" in hint
    # the values it names do fit
    assert not _codes(validate(patched(BASE_SPEC, {"rollout": {"gpu_memory_utilization": 0.78}})), "MEM003")
    assert _codes(validate(patched(BASE_SPEC, {"rollout": {"gpu_memory_utilization": 0.81}})), "MEM003")
    low = _codes(validate(patched(BASE_SPEC, {"rollout": {"tp": 1, "gpu_memory_utilization": 0.1},
                                              "linear": {"quantize": False}})), "MEM002")[0].hint
    assert "rollout.gpu_memory_utilization: 0.29" in low  # 0.27 holds one request; 0.29 keeps the 2 GiB margin
    assert not _codes(validate(patched(BASE_SPEC, {"rollout": {"tp": 1, "gpu_memory_utilization": 0.29},
                                                    "linear": {"quantize": False}})), "MEM002")
