"""A near miss of a field's choices gets a 'did you mean', in the spec and on init's command line."""

from __future__ import annotations

import pytest

from fp8spec.starter import StarterError, starter_spec
from tests.conftest import BASE_SPEC, patched


@pytest.mark.parametrize("patch,path,meant", [
    ({"hardware": {"gpu": "H100"}}, "hardware.gpu", "h100"),
    ({"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per-step"}}, "kv_cache.recalibrate", "per_step"),
    ({"kv_cache": {"dtype": "FP8_E4M3"}}, "kv_cache.dtype", "fp8_e4m3"),
    ({"correction": {"method": "tiss"}}, "correction.method", "tis"),
    ({"rollout": {"engine": "VLLM"}}, "rollout.engine", "vllm"),
])
def test_a_mistyped_choice_names_the_one_meant(patch, path, meant, validate):
    found = [d for d in validate(patched(BASE_SPEC, patch)).diagnostics if d.path == path]
    assert found and found[0].code == "S002", found
    assert found[0].hint == f"did you mean '{meant}'?"


def test_no_guess_for_a_value_far_from_every_choice(validate):
    found = [d for d in validate(patched(BASE_SPEC, {"hardware": {"gpu": "tpu-v5"}})).diagnostics
             if d.path == "hardware.gpu"]
    assert found and not (found[0].hint or "").startswith("did you mean")


def test_init_takes_a_model_id_in_any_case(tmp_path):
    result = starter_spec("dense-vllm", "qwen/qwen3-14b", "H100", None, 8, file=str(tmp_path / "s.yaml"),
                          spec_dir=tmp_path)
    spec = result.validation.loaded.spec
    assert spec.model.name == "Qwen/Qwen3-14B" and spec.hardware.gpu == "h100"


def test_init_names_the_model_meant_for_a_typo(tmp_path):
    with pytest.raises(StarterError, match=r"did you mean 'Qwen/Qwen3-14B'\?"):
        starter_spec("dense-vllm", "qwen/qwen3-14x", file=str(tmp_path / "s.yaml"), spec_dir=tmp_path)
