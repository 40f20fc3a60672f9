"""The profiles really switch behaviour by version. The same spec, compiled standalone for
vLLM 0.24.0 (what verl 0.9.1 pins) and 0.33.0 (the newest), gives different flags, each correct for its own
release (checked against that release's snapshot) and wrong for the other."""

from __future__ import annotations

import json

import pytest

from tests.conformance.checks import check_argv, check_bundle, compile_variant, pattern_style
from tests.conftest import SPECS

# The paper's MoE run, served standalone with an FP8 KV cache calibrated once: the router must stay in BF16
# (an ignore pattern) and the KV scales need vLLM's own calibration where it still exists.
PATCH = {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "once"}}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two-vllm")
    return {v: compile_variant(SPECS / "qwen3-30b.yaml", "vllm", {**PATCH, "stack": {"vllm": v}}, tmp,
                               f"vllm{v}")
            for v in ("0.24.0", "0.33.0")}


def _flags(argv):
    return [a for a in argv if a.startswith("--")]


def _ignore(argv):
    return json.loads(argv[argv.index("--quantization-config") + 1])["ignore"]


def test_same_spec_different_flags(both):
    old, new = both["0.24.0"].argv, both["0.33.0"].argv
    assert old != new
    # vLLM removed calculate_kv_scales (vllm-project/vllm#49389): only 0.24.0 can calibrate KV scales itself
    assert "--calculate-kv-scales" in _flags(old)
    assert "--calculate-kv-scales" not in _flags(new)
    assert set(_flags(old)) - set(_flags(new)) == {"--calculate-kv-scales"}
    # the router stays BF16 in both, spelled the way each release matches ignore patterns
    assert _ignore(old) == ["re:model\\.layers\\.\\d+\\.mlp\\.gate$"]
    assert [pattern_style(p) for p in _ignore(old)] == ["re:"]
    assert _ignore(new) == ["model.layers.*.mlp.gate"]
    assert [pattern_style(p) for p in _ignore(new)] == ["fnmatch"]
    # everything else is the same command
    def strip(argv):
        return [a for a in argv if a != "--calculate-kv-scales" and not a.startswith("{")]

    assert strip(old) == strip(new)


def test_each_is_correct_for_its_own_version(both):
    for version, c in both.items():
        assert check_argv(c.argv, "vllm", version, c.ctx) == [], version
        assert check_bundle(c) == [], version
        manifest = json.loads(c.files["manifest.json"])
        assert manifest["profiles"]["vllm"]["version"] == version


def test_each_is_wrong_for_the_other_version(both):
    on_033 = check_argv(both["0.24.0"].argv, "vllm", "0.33.0", both["0.33.0"].ctx)
    assert any(p.startswith("--calculate-kv-scales: not accepted by vllm 0.33.0") for p in on_033), on_033
    on_024 = check_argv(both["0.33.0"].argv, "vllm", "0.24.0", both["0.24.0"].ctx)
    assert any("fnmatch-style; vllm 0.24.0 matches only" in p for p in on_024), on_024
    # and the fnmatch pattern would match nothing under 0.24.0's exact/regex matching: the router would be
    # quantized
    assert any("miss ['model.layers.0.mlp.gate'" in p for p in on_024), on_024


def test_verl_bundles_calibrate_once_through_the_patch_on_both(tmp_path):
    """Inside verl, 'once' never maps to vLLM's calculate_kv_scales: on 0.24.0 it exists but calibrates on the
    profiling dummy run (measured on an H200, profile capability.calculate_kv_scales.usable_for_rl false), on
    0.33.0 it is gone. Both versions get the kv_scales runtime patch with FP8SPEC_KV_RECALIBRATE=once."""
    key = "actor_rollout_ref.rollout.engine_kwargs.vllm.calculate_kv_scales"
    for v in ("0.24.0", "0.33.0"):
        c = compile_variant(SPECS / "qwen3-30b.yaml", "megatron+vllm", {**PATCH, "stack": {"vllm": v}},
                            tmp_path, f"verl-vllm{v}")
        assert check_bundle(c) == [], v
        assert not any(key in o for o in c.overrides), v
        assert "kv_scales" in c.plan.patches, v
        assert c.env["FP8SPEC_KV_RECALIBRATE"] == "once", v
        assert "kv_scales" in c.env["FP8SPEC_RUNTIME_PATCHES"].split(","), v
