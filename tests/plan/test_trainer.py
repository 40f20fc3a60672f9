"""Trainer memory: FSDP and Megatron bytes per parameter and their sharding, FP8 caches, offload, stages."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from tests.conftest import BASE_SPEC, MEGATRON_FP8, MOE, patched, require, skip_missing_extra


@pytest.fixture
def plan_of(validate):
    from fp8spec.plan import build_memory_plan

    def run(*patches):
        result = validate(patched(BASE_SPEC, *patches))
        return build_memory_plan(result.context)

    return run


def test_fsdp_is_16_bytes_per_parameter_over_every_gpu(plan_of):
    plan = plan_of()
    t = plan.trainer
    params = plan.model.num_parameters()
    per_gpu = -(-params // 8)
    assert (t.params, t.grads, t.optimizer) == (4 * per_gpu, 4 * per_gpu, 8 * per_gpu)
    assert t.fp8_weight_cache == 0 and t.bytes_per_param == 16
    # during rollout FSDP keeps parameters and optimizer state (gradients are freed), plus the context and
    # what the 4B run measured beyond them
    assert t.resident_extra == int(0.92 * 2**30)
    assert t.resident_during_rollout == t.params + t.optimizer + t.context + t.resident_extra


def test_offload_frees_rollout_memory_not_training_memory(plan_of):
    base = plan_of().trainer
    off = plan_of({"training": {"offload": {"params": True, "optimizer": True}}}).trainer
    assert off.resident_during_rollout == off.context + off.resident_extra
    assert off.peak == base.peak  # verl loads offloaded state back for the whole training pass


def test_megatron_layout_bytes(plan_of):
    plan = plan_of(MOE, MEGATRON_FP8, {"training": {"parallel": {"tp": 2, "pp": 2, "ep": 4}}})
    t = plan.trainer
    lay = t.layout
    # 8 GPUs, tp 2 x pp 2 x ep 4 = 16 > 8 for etp = tp, so Megatron could not start with etp 2: etp 1
    assert lay["etp"] == 1 and any("planned with etp 1" in n for n in t.notes)
    assert lay["dp"] == 2 and lay["expert_dp"] == 1
    assert t.params == 2 * t.params_on_gpu and t.grads == 4 * t.params_on_gpu  # bf16 params, fp32 grad buffer
    assert t.fp8_weight_cache > 0 and t.bytes_per_param == 2 + 4 + 12 + 2
    # experts: 24 MoE layers per stage, 128 experts split over ep 4 -> 32 per GPU
    experts_per_gpu = 24 * 32 * 3 * 768 * 2048
    assert t.params_on_gpu > experts_per_gpu
    assert t.optimizer >= 12 * experts_per_gpu  # expert data parallelism 1: the whole expert share


def test_te_fp8_weight_copies_stay_beside_the_engine_unless_params_are_offloaded(plan_of):
    # verl clears TE's cached FP8 weights only in offload_megatron_model_to_cpu (memory.colocation)
    fp8 = plan_of(MOE, MEGATRON_FP8, {"training": {"parallel": {"tp": 2, "pp": 2, "ep": 4}}}).trainer
    bf16 = plan_of(MOE, MEGATRON_FP8, {"training": {"precision": "bf16", "parallel": {"tp": 2, "pp": 2,
                                                                                     "ep": 4}}}).trainer
    assert fp8.fp8_weight_cache > 0 and bf16.fp8_weight_cache == 0
    assert fp8.resident_during_rollout - bf16.resident_during_rollout == fp8.fp8_weight_cache
    off = plan_of(MOE, MEGATRON_FP8, {"training": {"parallel": {"tp": 2, "pp": 2, "ep": 4},
                                                   "offload": {"params": True}}}).trainer
    assert off.resident_during_rollout == off.optimizer + off.context + off.resident_extra
    assert fp8.resident_extra == int(4.83 * 2**30)  # measured beyond Megatron's state (the 9-layer MoE run)


def test_bf16_megatron_has_no_fp8_cache(plan_of):
    t = plan_of(MOE, {"training": {"backend": "megatron", "parallel": {"tp": 2, "ep": 4}}}).trainer
    assert t.fp8_weight_cache == 0


def test_uneven_pipeline_stages_when_the_spec_gives_them():
    from fp8spec.plan.trainer import _stage_layers

    spec = SimpleNamespace(training=SimpleNamespace(parallel=SimpleNamespace(first_stage_layers=13,
                                                                             last_stage_layers=12)))
    assert _stage_layers(spec, 61, 5) == [13, 12, 12, 12, 12]
    even = SimpleNamespace(training=SimpleNamespace(parallel=SimpleNamespace()))
    assert _stage_layers(even, 48, 2) == [24, 24]


def test_longer_micro_batches_grow_activations_and_logits(plan_of):
    # fixed micro-batches (dynamic batching, the default, sizes them by token budget instead)
    one = plan_of({"algorithm": {"use_dynamic_bsz": False}}).trainer
    four = plan_of({"algorithm": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 4}}).trainer
    assert four.logits == 4 * one.logits and four.activations > 3 * one.activations


@pytest.mark.parametrize("backend_patch", [{}, {"training": {"backend": "megatron", "parallel": {"tp": 2}}}],
                         ids=["fsdp", "megatron"])
def test_offload_settings_compose_in_verl(backend_patch, validate):
    """training.offload becomes verl's own keys, accepted by its Hydra tree."""
    require("hydra")
    if importlib.util.find_spec("verl") is None:
        skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)")
    from fp8spec.compiler.build import build_settings_plan, choose_backend
    from fp8spec.compiler.bundle import bundle_files
    from tests.compiler.test_verl_compose import compose, overrides_of

    # responses of 8K keep the Megatron trainer's peak on the H100 (at 20K it is MEM006)
    validation = validate(patched(BASE_SPEC, backend_patch, {"training": {"offload": {"params": True,
                                                                                      "optimizer": True}},
                                                             "rollout": {"max_response_length": 8192}}))
    assert not validation.errors, [d.render() for d in validation.errors]
    choice = choose_backend(None, validation)
    files = bundle_files(validation.valid(), choice, build_settings_plan(validation.valid(), choice), "spec.yaml")
    cfg = compose(overrides_of(files))
    engine = cfg.actor_rollout_ref.actor.megatron if backend_patch else cfg.actor_rollout_ref.actor.fsdp_config
    assert engine.param_offload is True and engine.optimizer_offload is True
    # without offload the 8B trainer state needs Megatron tp 4 on an H100 (tp 2: MEM003)
    off = validate(patched(BASE_SPEC, backend_patch, {"training": {"parallel": {"tp": 4}}} if backend_patch else {}))
    assert not off.errors, [d.render() for d in off.errors]
    plain = bundle_files(off.valid(), choose_backend(None, off), build_settings_plan(off.valid(), choose_backend(None, off)),
                         "spec.yaml")
    assert "offload" not in plain["overrides.yaml"]


def test_megatron_trainer_is_planned_in_both_precisions(plan_of):
    plan = plan_of(MOE, MEGATRON_FP8, {"training": {"parallel": {"ep": 4}}})
    fp8, bf16 = plan.trainer, plan.trainer_other
    assert (fp8.precision, bf16.precision) == ("fp8", "bf16")
    assert bf16.fp8_weight_cache == 0 < fp8.fp8_weight_cache
    assert fp8.activations < bf16.activations  # FP8 linear inputs are saved in one byte
    assert fp8.params == bf16.params and fp8.optimizer == bf16.optimizer
    assert plan_of().trainer_other is None  # FSDP trains in BF16 only


def test_gradient_checkpointing_off_keeps_every_layers_activations(plan_of):
    from fp8spec.plan.trainer import _layer_bytes_per_token

    on = plan_of().trainer  # verl's default: on
    off = plan_of({"training": {"gradient_checkpointing": False}}).trainer
    explicit_on = plan_of({"training": {"gradient_checkpointing": True}}).trainer
    plan = plan_of()
    model, tokens = plan.model, off.micro_batch_tokens
    per_layer = _layer_bytes_per_token(model, False)
    assert off.activations == model.num_hidden_layers * tokens * per_layer
    assert on.activations == model.num_hidden_layers * tokens * 2 * model.hidden_size + tokens * per_layer
    assert explicit_on.activations == on.activations and off.activations > 5 * on.activations
    # each plan names the other choice's activations and peak, so the trade is visible before the run
    note_on = next(n for n in on.notes if "gradient checkpointing on (verl's default)" in n)
    assert f"{off.activations / 2**30:.1f} GiB of activations" in note_on
    note_off = next(n for n in off.notes if "gradient checkpointing off (training.gradient_checkpointing)" in n)
    assert f"{on.activations / 2**30:.1f} GiB of activations" in note_off
    assert "(training.gradient_checkpointing)" in next(n for n in explicit_on.notes if "checkpointing on" in n)


def test_gradient_checkpointing_compiles_to_verls_key_and_composes(validate):
    require("hydra")
    if importlib.util.find_spec("verl") is None:
        skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)")
    from fp8spec.compiler.build import build_settings_plan, choose_backend
    from fp8spec.compiler.bundle import bundle_files
    from tests.compiler.test_verl_compose import compose, overrides_of

    def files_of(*patches):
        v = validate(patched(BASE_SPEC, {"rollout": {"max_response_length": 8192}}, *patches))
        assert not v.errors, [d.render() for d in v.errors]
        choice = choose_backend(None, v)
        return bundle_files(v.valid(), choice, build_settings_plan(v.valid(), choice), "spec.yaml")

    off = files_of({"training": {"gradient_checkpointing": False}})
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=false" in off["overrides.yaml"]
    assert compose(overrides_of(off)).actor_rollout_ref.model.enable_gradient_checkpointing is False
    default = files_of()
    assert "enable_gradient_checkpointing" not in default["overrides.yaml"]  # verl's own default stands
    assert compose(overrides_of(default)).actor_rollout_ref.model.enable_gradient_checkpointing is True


def test_the_old_log_prob_pass_is_planned_at_its_own_budget(plan_of):
    """verl runs the old-log-prob pass (with entropy) at log_prob_max_token_len_per_gpu: its logits and
    temporaries (memory.log_prob_pass_logit_bytes) and one layer's activations, without gradients."""
    from fp8spec.plan.trainer import _layer_bytes_per_token

    same = plan_of()
    t = same.trainer
    tokens = t.micro_batch_tokens
    assert t.log_prob_tokens == tokens  # the budget defaults to the update's
    per_layer = _layer_bytes_per_token(same.model, False)
    assert t.log_prob_pass == tokens * same.model.vocab_size * 4 + tokens * per_layer + t.transient
    assert t.peak_phase != "old log-prob" and not [n for n in t.notes if "old-log-prob pass" in n]
    big = plan_of({"algorithm": {"log_prob_max_token_len_per_gpu": 16 * tokens}}).trainer
    assert big.log_prob_tokens == 16 * tokens and big.peak_phase == "old log-prob"
    assert big.peak == big.state + big.log_prob_pass + big.context > t.peak
    assert big.pass_transients == t.pass_transients  # the update is unchanged
    note = next(n for n in big.notes if "the old-log-prob pass sets the training peak" in n)
    assert f"{16 * tokens:,}-token micro-batches" in note and f"update's {tokens:,}" in note


def test_the_old_log_prob_pass_on_megatron_shards_the_vocabulary_and_skips_stages_without_the_output(plan_of):
    base = {"training": {"backend": "megatron", "parallel": {"tp": 2}}}
    plan = plan_of(base)
    t = plan.trainer
    tokens = t.log_prob_tokens
    vocab = -(-plan.model.vocab_size // 2)
    assert t.log_prob_pass >= tokens * vocab * 8  # bf16 logits, their clone, megatron-core's fp32 copy
    # fixed micro-batches: the log-prob pass takes its own size
    fixed = plan_of(base, {"algorithm": {"use_dynamic_bsz": False, "log_prob_micro_batch_size_per_gpu": 8}}).trainer
    assert fixed.log_prob_tokens == 8 * fixed.micro_batch_tokens and fixed.peak_phase == "old log-prob"
    # a pipeline stage without the output layer holds no logits in the pass
    staged = plan_of(base, {"training": {"parallel": {"tp": 1, "pp": 2}}}).trainer
    if staged.layout["busiest_stage"] != staged.layout["pp"] - 1:
        assert staged.log_prob_pass < staged.log_prob_tokens * plan.model.vocab_size
    else:
        assert staged.log_prob_pass >= staged.log_prob_tokens * plan.model.vocab_size * 8
