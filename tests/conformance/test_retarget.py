"""One spec, every backend: each example spec retargeted to each of the six backends (13 x 6).

A pair either compiles, and the bundle is checked like every other (keys, flags and env vars against the
release snapshots; trainer bundles composed in real verl 0.9.1 and passed through its validate_config), or it
is refused by named rules, exactly the ones in the table, each with a hint.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from fp8spec.targets import BACKENDS
from tests.conformance.checks import check_bundle, compile_path
from tests.conftest import EXAMPLE_SPECS, REPO, require, skip_missing_extra

require("hydra")
if importlib.util.find_spec("verl") is None:
    skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)

SPECS = {p.stem: p for p in EXAMPLE_SPECS}
# (example, backend) -> the error codes that refuse it; pairs not listed compile.
REFUSED = {
    # FP8 end-to-end training exists only on Megatron + TransformerEngine
    ("qwen3-30b", "fsdp+vllm"): {"TRN001"},
    ("qwen3-30b", "fsdp+sglang"): {"TRN001"},
    ("qwen3-30b-sglang", "fsdp+vllm"): {"TRN001"},
    ("qwen3-30b-sglang", "fsdp+sglang"): {"TRN001"},
    # the 8B runs' rollout memory share (0.6) leaves no room for Megatron's unsharded bf16 weights and fp32
    # gradients beside the engine without offloading; at the specs' Megatron TP 2 the training peak is also
    # beyond the H100 by more than the 10 % margin (MEM006)
    ("qwen3-8b", "megatron+vllm"): {"MEM003", "MEM006"},
    ("qwen3-8b", "megatron+sglang"): {"MEM003", "KV007", "MEM006"},
    ("qwen3-8b-sglang", "megatron+vllm"): {"MEM003", "MEM006"},
    ("qwen3-8b-sglang", "megatron+sglang"): {"MEM003", "MEM006"},
    # per-step FP8 KV scales on SGLang: its FlashInfer decode (verl's default) keeps graph-captured scales
    ("qwen3-8b", "fsdp+sglang"): {"KV007"},
    ("qwen3-8b", "sglang"): {"KV007"},
    ("tiny-qwen3-h200", "fsdp+sglang"): {"KV007"},
    ("tiny-qwen3-h200", "megatron+sglang"): {"KV007"},
    ("tiny-qwen3-h200", "sglang"): {"KV007"},
    # the Megatron MoE runs name TransformerEngine's attention backend, which the FSDP trainer has not (TRN006);
    # end-to-end FP8 training needs Megatron (TRN001); per-step FP8 KV scales again KV007 on SGLang
    ("tiny-qwen3-moe-megatron-bf16", "fsdp+vllm"): {"TRN006"},
    ("tiny-qwen3-moe-megatron-bf16", "fsdp+sglang"): {"TRN006"},
    ("tiny-qwen3-moe-megatron-fp8-rollout", "fsdp+vllm"): {"TRN006"},
    ("tiny-qwen3-moe-megatron-fp8-rollout", "fsdp+sglang"): {"KV007", "TRN006"},
    ("tiny-qwen3-moe-megatron-fp8-rollout", "megatron+sglang"): {"KV007"},
    ("tiny-qwen3-moe-megatron-fp8-rollout", "sglang"): {"KV007"},
    ("tiny-qwen3-moe-megatron-fp8", "fsdp+vllm"): {"TRN001", "TRN006"},
    ("tiny-qwen3-moe-megatron-fp8", "fsdp+sglang"): {"KV007", "TRN001", "TRN006"},
    ("tiny-qwen3-moe-megatron-fp8", "megatron+sglang"): {"KV007"},
    ("tiny-qwen3-moe-megatron-fp8", "sglang"): {"KV007"},
    # the training layout (training.bf16_modules) needs end-to-end FP8 on Megatron as well (TRN008)
    ("tiny-qwen3-moe-megatron-fp8-experts-bf16", "fsdp+vllm"): {"TRN001", "TRN006", "TRN008"},
    ("tiny-qwen3-moe-megatron-fp8-experts-bf16", "fsdp+sglang"): {"KV007", "TRN001", "TRN006", "TRN008"},
    ("tiny-qwen3-moe-megatron-fp8-experts-bf16", "megatron+sglang"): {"KV007"},
    ("tiny-qwen3-moe-megatron-fp8-experts-bf16", "sglang"): {"KV007"},
    ("tiny-qwen3-moe-megatron-sglang-fp8-experts-bf16", "fsdp+vllm"): {"TRN001", "TRN006", "TRN008"},
    ("tiny-qwen3-moe-megatron-sglang-fp8-experts-bf16", "fsdp+sglang"): {"TRN001", "TRN006", "TRN008"},
    # tiny-qwen3-h200-sglang(-bf16) compile on every backend: their KV cache is BF16
}
PAIRS = [(stem, backend) for stem in sorted(SPECS) for backend in BACKENDS]


def test_the_matrix_is_every_example_on_every_backend():
    assert len(SPECS) == 13 and len(BACKENDS) == 6 and len(PAIRS) == 78
    assert set(REFUSED) < set(PAIRS)


def _named(stem: str) -> str:
    """The backend the example names: its training.backend + rollout.engine."""
    from fp8spec.specfile.loader import load_spec

    spec = load_spec(SPECS[stem]).spec
    return f"{spec.training.backend}+{spec.rollout.engine}"


def _own(stem: str) -> set[str]:
    """The backends an example compiles for without retargeting: its own, and its engine alone."""
    return {_named(stem), _named(stem).split("+")[1]}


@pytest.mark.parametrize("stem,backend", PAIRS, ids=[f"{s}-{b}" for s, b in PAIRS])
def test_example_on_backend(stem, backend):
    from fp8spec.compiler.build import validate_for

    path = SPECS[stem]
    validation, choice = validate_for(path, str(path.relative_to(REPO)), backend)
    assert choice.name == backend
    assert bool(validation.retargeted) == (backend not in _own(stem))
    refused = REFUSED.get((stem, backend))
    if refused:
        assert {d.code for d in validation.errors} == refused, [d.render() for d in validation.errors]
        assert all(d.hint for d in validation.errors)
        return
    assert not validation.errors, [d.render() for d in validation.errors]
    compiled = compile_path(path, backend, str(path.relative_to(REPO)))
    assert check_bundle(compiled) == []
    manifest = json.loads(compiled.files["manifest.json"])
    assert manifest["backend"] == backend
    readme = compiled.files["README.md"]
    if validation.retargeted:
        assert "**Retargeted**" in readme and f"`--backend {backend}`" in readme
        assert manifest["retargeted_from"] == _named(stem)
    else:
        assert "Retargeted" not in readme and "retargeted_from" not in manifest


TRAINER_PAIRS = [(s, b) for s, b in PAIRS if "+" in b and (s, b) not in REFUSED and b not in _own(s)]


@pytest.mark.parametrize("stem,backend", TRAINER_PAIRS, ids=[f"{s}-{b}" for s, b in TRAINER_PAIRS])
def test_retargeted_trainer_bundle_passes_verl(stem, backend):
    """verl composes the retargeted bundle's overrides and its own validate_config accepts them."""
    require("ray")
    require("tensordict")
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from tests.compiler.test_verl_compose import compose, overrides_of

    compiled = compile_path(SPECS[stem], backend)
    cfg = compose(overrides_of(compiled.files))
    trainer, engine = backend.split("+")
    assert cfg.actor_rollout_ref.rollout.name == engine
    assert cfg.actor_rollout_ref.actor.strategy == ("megatron" if trainer == "megatron" else "fsdp")
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
