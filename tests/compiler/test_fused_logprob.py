"""training.fused_logprob compiles to verl's fused log-prob keys, which compose in verl's own Hydra tree; unset,
verl's default stands; on the Megatron trainer it compiles nothing and rule TRN014 says so."""

from __future__ import annotations

import importlib.util

from tests.conftest import BASE_SPEC, SPECS, patched, require, skip_missing_extra


def _files(validate, *patches, base=BASE_SPEC):
    from fp8spec.compiler.build import build_settings_plan, choose_backend
    from fp8spec.compiler.bundle import bundle_files

    v = validate(patched(base, *patches))
    assert not v.errors, [d.render() for d in v.errors]
    choice = choose_backend(None, v)
    return v, bundle_files(v.valid(), choice, build_settings_plan(v.valid(), choice), "spec.yaml")


def test_fused_logprob_compiles_to_verls_keys_and_composes(validate):
    require("hydra")
    if importlib.util.find_spec("verl") is None:
        skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)")
    from tests.compiler.test_verl_compose import compose, overrides_of

    _, on = _files(validate, {"training": {"fused_logprob": True}})
    assert "actor_rollout_ref.model.use_fused_kernels=true" in on["overrides.yaml"]
    model = compose(overrides_of(on)).actor_rollout_ref.model
    assert model.use_fused_kernels is True and model.fused_kernel_options.impl_backend == "torch"
    _, off = _files(validate, {"training": {"fused_logprob": False}})
    assert "actor_rollout_ref.model.use_fused_kernels=false" in off["overrides.yaml"]
    assert "impl_backend" not in off["overrides.yaml"]
    _, default = _files(validate)
    assert "use_fused_kernels" not in default["overrides.yaml"]  # verl's own default stands
    assert compose(overrides_of(default)).actor_rollout_ref.model.use_fused_kernels is False


def test_on_megatron_it_compiles_nothing_and_trn014_says_so(validate):
    from ruamel.yaml import YAML

    example = YAML(typ="safe").load((SPECS / "qwen3-30b.yaml").read_text(encoding="utf-8"))  # Megatron + vLLM
    assert example["training"]["backend"] == "megatron"
    v, files = _files(validate, {"training": {"fused_logprob": True}}, base=example)
    assert [d.code for d in v.diagnostics if d.code == "TRN014"] == ["TRN014"]
    assert "use_fused_kernels" not in files["overrides.yaml"]
