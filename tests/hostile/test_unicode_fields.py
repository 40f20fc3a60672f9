"""Any Unicode text in any string field, for every backend and launcher: either a located schema error that
names the field, or a bundle whose every file reads back to exactly the spec's values (YAML 1.1 and 1.2
readers agree, bash runs the same words, Hydra parses the same values). Property-based (Hypothesis)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8spec.compiler.build import build_settings_plan, choose_backend
from fp8spec.compiler.bundle import bundle_files
from fp8spec.rules.runner import validate_path
from fp8spec.specfile.text import first_refused
from tests.conftest import BASE_SPEC, patched
from tests.hostile.bundle_oracle import check_bundle
from tests.hostile.spec_fields import ITEM_FIELDS, set_path, string_fields, to_yaml

BACKENDS = {
    "fsdp+vllm": {},
    "fsdp+sglang": {"rollout": {"engine": "sglang"}},
    # offload: the base model's Megatron trainer state would not leave the engine room (MEM003); TP 2 and 8K
    # responses: at TP 1 and 20K its training peak is past the H100 by more than the 10 % margin (MEM006)
    "megatron+vllm": {"training": {"backend": "megatron", "offload": {"params": True, "optimizer": True},
                                   "parallel": {"tp": 2}},
                      "rollout": {"max_response_length": 8192}},
    "megatron+sglang": {"training": {"backend": "megatron", "offload": {"params": True, "optimizer": True},
                                     "parallel": {"tp": 2}},
                        "rollout": {"engine": "sglang", "max_response_length": 8192}},
    "vllm": {},
    "sglang": {"rollout": {"engine": "sglang"}},
}
LAUNCHERS = ("ray", "slurm", "kuberay")
FIELDS = string_fields()
# Kept small so CI stays fast; FP8SPEC_FUZZ_EXAMPLES=500 for a deeper run.
EXAMPLES = int(os.environ.get("FP8SPEC_FUZZ_EXAMPLES", "12"))
# Characters that broke readers or writers before (line separators, NEL, bidi, BOM, C0/C1, surrogates, ...),
# and the ones every quoting layer cares about.
TRICKY = list("\u2028\u2029\x85\u202e\u2066\u200f\u061c\ufeff\x00\x1b\x7f\x9b\ud800\udfff\ufffe\U000e0001"
              "'\"\\$`!{}[]#:-|>&*%@,?=~\t\n\r é中😀\u00a0\u0301\ue000")
ANY_CHAR = st.one_of(st.characters(), st.sampled_from(TRICKY))
# Characters the text rule allows: most generated values then compile, so whole bundles get read back.
ALLOWED_CHAR = st.one_of(st.characters(exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp")),
                         st.sampled_from([c for c in TRICKY if c.isprintable() or c in "\u00a0\ue000"]))
TEXT = st.one_of(st.text(ANY_CHAR, min_size=1, max_size=30), st.text(ALLOWED_CHAR, min_size=1, max_size=30),
                 st.text(ALLOWED_CHAR, min_size=1, max_size=30))


def test_fields_are_found():
    paths = {p for p, _ in FIELDS}
    assert {("model", "path"), ("cluster", "working_dir"), ("cluster", "kuberay", "image"),
            ("data", "train_files"), ("cluster", "slurm", "extra_sbatch"), ("acknowledge",)} <= paths
    free = {p for p, _ in FREE_FIELDS}
    assert {("model", "path"), ("cluster", "working_dir")} <= free  # (an address has no blanks)


def _spec_with(backend: str, launcher: str, path: tuple, shape: str, value: str) -> dict:
    data = patched(BASE_SPEC, BACKENDS[backend], {"cluster": {"launcher": launcher}})
    set_path(data, path, {"str": value, "list": [value], "dict": {"COR001": value}}[shape])
    return data


def _free_text(field) -> bool:
    """Whether the field takes ordinary non-ASCII text (no pattern): those are worth most examples."""
    from fp8spec.specfile.loader import load_spec_text

    path, shape = field
    loaded = load_spec_text(to_yaml(_spec_with("fsdp+vllm", "ray", path, shape, "/a b/é")))
    return not loaded.diagnostics


FREE_FIELDS = [f for f in FIELDS if _free_text(f)]


def _field_value(spec, path: tuple, shape: str):
    value = spec
    for part in path:
        value = getattr(value, part)
    return {"str": lambda v: v, "list": lambda v: v[0], "dict": lambda v: v["COR001"]}[shape](value)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.one_of(st.sampled_from(FIELDS), st.sampled_from(FREE_FIELDS)), value=TEXT,
       launcher=st.sampled_from(LAUNCHERS))
def test_any_text_in_any_field(backend, field, value, launcher):
    path, shape = field
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec.yaml"
        spec_file.write_text(to_yaml(_spec_with(backend, launcher, path, shape, value)), encoding="utf-8",
                             errors="surrogatepass")
        validation = validate_path(spec_file)
    dotted = ".".join(path)
    if first_refused(value) is not None or "${" in value:
        found = [d for d in validation.errors if d.code == "S002" and d.path.startswith(dotted)]
        assert found, [d.render() for d in validation.diagnostics]
        assert all(d.line > 1 for d in found)
        return
    if validation.errors:
        assert all(d.line >= 1 and d.col >= 1 for d in validation.errors)
        return
    spec = validation.loaded.spec
    assert _field_value(spec, path, shape) == value, "the reader changed the value"
    choice = choose_backend(backend, validation)
    plan = build_settings_plan(validation.valid(), choice)
    files = bundle_files(validation.valid(), choice, plan, "spec.yaml")
    assert check_bundle(spec, plan, choice, files) == []


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_examples_read_back_exactly(backend):
    """The oracle itself on a plain spec, so a failing property above is about the text, not the oracle."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec.yaml"
        data = _spec_with(backend, "slurm", ("model", "path"), "str", "/models/Qwen3 8B 'é' \"q\" $x `y` \\z")
        data["cluster"]["slurm"] = {"partition": "gpu", "extra_sbatch": ["--qos=high"]}
        spec_file.write_text(to_yaml(data), encoding="utf-8")
        validation = validate_path(spec_file)
    assert not validation.errors, [d.render() for d in validation.errors]
    choice = choose_backend(backend, validation)
    plan = build_settings_plan(validation.valid(), choice)
    files = bundle_files(validation.valid(), choice, plan, "spec.yaml")
    assert check_bundle(validation.loaded.spec, plan, choice, files) == []


ITEM_CASES = [(lst, name) for lst, (_, names) in ITEM_FIELDS.items() for name in names]


@pytest.mark.parametrize("list_path,name", ITEM_CASES, ids=lambda v: ".".join(v) if isinstance(v, tuple) else v)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=TEXT)
def test_any_text_in_list_item_fields(list_path, name, value):
    """Strings inside list items (KubeRay volumes, secret env vars) follow the same character rule."""
    item, _ = ITEM_FIELDS[list_path]
    item = dict(item, **{name: value})
    if name == "host_path":
        item.pop("pvc")
    data = _spec_with("fsdp+vllm", "kuberay", ("model", "path"), "str", "/models/m")
    set_path(data, list_path, [item])
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec.yaml"
        spec_file.write_text(to_yaml(data), encoding="utf-8", errors="surrogatepass")
        validation = validate_path(spec_file)
    if first_refused(value) is not None or "${" in value:
        dotted = ".".join(list_path)
        found = [d for d in validation.errors if d.code == "S002" and d.path.startswith(dotted)]
        assert found and all(d.line > 1 for d in found), [d.render() for d in validation.diagnostics]
        return
    if validation.errors:  # a pattern the field refuses (labels, paths): located, never a crash
        assert all(d.line >= 1 and d.col >= 1 for d in validation.errors)
        return
    choice = choose_backend("fsdp+vllm", validation)
    plan = build_settings_plan(validation.valid(), choice)
    files = bundle_files(validation.valid(), choice, plan, "spec.yaml")
    assert check_bundle(validation.loaded.spec, plan, choice, files) == []
