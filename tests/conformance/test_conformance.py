"""Every example spec, compiled for every backend it supports, emits only what the targeted releases accept.

Three sets of bundles, all compiled through the real API and checked item by item against the schema
snapshots (see tests/conformance/checks.py for what is checked):

- the example specs as written (the default stack: the golden bundles' cases),
- the same specs re-pinned to every profiled engine version (vLLM 0.24.0 / 0.33.0, SGLang 0.5.12 / 0.5.23)
  and, for Megatron bundles, every profiled megatron-core version,
- feature variants of the examples that reach the adapter branches the examples leave out (FP8 KV cache
  recalibrated once or per step on each engine, UE8M0 scales, BF16 first/last layers, FP32 routing,
  exclusions beyond the router, IcePop masking), on every engine version.
"""

from __future__ import annotations

import importlib.util

import pytest

from fp8spec.profiles import available_versions
from tests.compiler.golden import cases
from tests.conformance.checks import check_bundle, compile_path, compile_variant
from tests.conftest import EXAMPLE_SPECS, REPO, require, skip_missing_extra

require("hydra")
if importlib.util.find_spec("verl") is None:
    skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)

SPECS = {p.stem: p for p in EXAMPLE_SPECS}
REWARD_OK = str(REPO / "tests" / "rules" / "data" / "reward_ok.py")


def _engine(backend: str) -> str:
    return backend.rsplit("+", 1)[-1]


def _pinned() -> list[tuple]:
    out = []
    for spec_path, backend in cases():
        engine = _engine(backend)
        mcore = available_versions("megatron-core") if backend.startswith("megatron") else [None]
        for version in available_versions(engine):
            for mv in mcore:
                stack = {engine: version} | ({"megatron_core": mv} if mv else {})
                pins = "-".join(f"{k}{v}" for k, v in stack.items())
                out.append(pytest.param(spec_path, backend, {"stack": stack},
                                        id=f"{spec_path.stem}-{backend}-{pins}"))
    return out


# name -> (example spec, patch); each is compiled for the spec's trainer+engine and engine-alone backends
FEATURES = {
    "kv-once": ("qwen3-8b", {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "once"}}),
    "kv-none": ("qwen3-8b", {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}}),
    "ue8m0": ("qwen3-8b", {"linear": {"scale_dtype": "ue8m0"}}),
    "icepop": ("qwen3-8b", {"correction": {"method": "mask", "bounds": [0.5, 2.0]}}),
    # per-step scales on SGLang are refused (KV007: FlashInfer decode keeps graph-captured scales); static FP8 KV
    "sglang-kv-static": ("qwen3-8b-sglang", {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}}),
    "sglang-exclude": ("qwen3-30b-sglang", {"linear": {"exclude": ["lm_head", "embeddings", "norms", "router",
                                                                   "self_attn.o_proj"]}}),
    "moe-bf16-ends": ("qwen3-30b", {"linear": {"bf16_first_layers": 1, "bf16_last_layers": 1},
                                    "training": {"router_dtype": "fp32"}}),
    "moe-exclude-kv": ("qwen3-30b", {"linear": {"exclude": ["lm_head", "embeddings", "norms", "router",
                                                            "self_attn.o_proj"]},
                                     "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}}),
    # the 28-layer stage keeps more beside the engine: the plan's share for it
    "moe-uneven-r3": ("qwen3-30b", {"training": {"router_replay": "R3", "parallel": {
        "pp": 2, "first_stage_layers": 20, "last_stage_layers": 28}}, "rollout": {"gpu_memory_utilization": 0.34}}),
    "custom-reward-budgets": ("qwen3-8b-sglang", {"reward": {"custom_function": {"path": REWARD_OK}},
                                                  "algorithm": {"log_prob_max_token_len_per_gpu": 32768}}),
}


def _features() -> list[tuple]:
    out = []
    by_spec = {}
    for spec_path, backend in cases():
        by_spec.setdefault(spec_path.stem, []).append(backend)
    for name, (stem, patch) in FEATURES.items():
        for backend in by_spec[stem]:
            engine = _engine(backend)
            for version in available_versions(engine):
                full = {**patch, "stack": {engine: version}}
                out.append(pytest.param(SPECS[stem], backend, full, id=f"{name}-{backend}-{engine}{version}"))
    return out


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_example_bundle_conforms(spec_path, backend):
    from tests.conftest import REPO

    compiled = compile_path(spec_path, backend, str(spec_path.relative_to(REPO)))
    assert check_bundle(compiled) == []


@pytest.mark.parametrize("spec_path,backend,patch", _pinned())
def test_pinned_bundle_conforms(spec_path, backend, patch, tmp_path):
    compiled = compile_variant(spec_path, backend, patch, tmp_path)
    for kind, version in patch["stack"].items():
        assert getattr(compiled.spec.stack, kind) == version
    assert check_bundle(compiled) == []


@pytest.mark.parametrize("spec_path,backend,patch", _features())
def test_feature_variant_conforms(spec_path, backend, patch, tmp_path):
    compiled = compile_variant(spec_path, backend, patch, tmp_path)
    assert check_bundle(compiled) == []
