"""verl: the trainer command line (Hydra overrides) shared by every TRAINER+ENGINE backend.

Key names come from the verl profile (backends/verl/<version>.yaml), never from literals here, so a verl
release that renames a key is a new profile, not a code change.
"""

from __future__ import annotations

from typing import Any

from fp8spec.compiler.settings import SettingsPlan
from fp8spec.resolve.valid import ValidSpec
from fp8spec.trainers import get_trainer

_CORRECTION = {  # method -> (rollout_is level, threshold kind)
    "tis": ("token", "clip"),
    "seq_tis": ("sequence", "clip"),
    "mask": ("token", "bounds"),
    "seq_mask": ("sequence", "bounds"),
}


class VerlKeys:
    """Reads Hydra key names and '+' rules from the verl profile."""

    def __init__(self, profile):
        self.profile = profile
        self._plus_under = profile.value("hydra.plus_required_under")

    def key(self, fact_id: str) -> str:
        return self.profile.value(fact_id)

    def evidence(self, fact_id: str) -> str:
        return self.profile.evidence(fact_id)

    def needs_plus(self, key: str) -> bool:
        """Keys under an open mapping of verl's YAML (engine_kwargs.vllm, override_transformer_config, ...)
        are not declared and must be added with '+'; declared ones must not."""
        for prefix, declared in self._plus_under.items():
            if key.startswith(prefix + "."):
                first = key[len(prefix) + 1 :].split(".", 1)[0]
                return first not in declared
        return False


def add(
    plan: SettingsPlan, keys: VerlKeys, fact_id: str, value: Any, source: str, why: str, suffix: str = ""
) -> None:
    key = keys.key(fact_id) + suffix
    plan.add("hydra", key, value, source, why, keys.evidence(fact_id), keys.needs_plus(key))


def add_engine_arg(
    plan: SettingsPlan,
    keys: VerlKeys,
    ctx: ValidSpec,
    arg_fact: str,
    value: Any,
    source: str,
    why: str,
    evidence: str,
) -> None:
    """A setting under verl's rollout.engine_kwargs.<engine> (an open mapping: '+' where verl's YAML does not
    declare the key); the argument's name is the fact ``arg_fact`` of the engine's profile."""
    engine = ctx.engine.name
    key = f"{keys.key(f'key.rollout_engine_kwargs_{engine}')}.{ctx.profile(engine).value(arg_fact)}"
    plan.add("hydra", key, value, source, why, evidence, keys.needs_plus(key))


def build_verl(plan: SettingsPlan, ctx: ValidSpec, trainer: str, engine: str) -> VerlKeys:
    spec = ctx.spec
    keys = VerlKeys(ctx.profile("verl"))
    plan.entrypoint = keys.key("entrypoint").split()
    if get_trainer(trainer).verl_model_engine:
        plan.add(
            "hydra",
            keys.key("key.model_engine"),
            get_trainer(trainer).verl_model_engine,
            "training.backend",
            "select verl's Megatron engine (model_engine defaults group)",
            keys.evidence("key.model_engine"),
        )
    add(plan, keys, "key.model_path", spec.model.path, "model.path", "weights on the cluster")
    add(plan, keys, "key.rollout_name", engine, "rollout.engine", "rollout engine")
    _rollout(plan, keys, ctx)
    _correction(plan, keys, ctx)
    _algorithm(plan, keys, ctx)
    _data_and_trainer(plan, keys, ctx, trainer)
    _offload(plan, keys, ctx, trainer)
    if get_trainer(trainer).hf_model:
        _attention(plan, keys, ctx)
        _checkpointing(plan, keys, ctx)
        _fused_logprob(plan, keys, ctx)
    return keys


def _fused_logprob(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    value = ctx.spec.training.fused_logprob
    if value is None:  # verl's default (off) stands
        return
    add(
        plan,
        keys,
        "key.model_use_fused_kernels",
        value,
        "training.fused_logprob",
        "log-probs and entropy from the hidden states in chunks of 512 tokens, no full logits"
        if value
        else "log-probs from the full logits (verl's default path)",
    )
    if value:
        add(
            plan,
            keys,
            "key.model_fused_kernels_backend",
            "torch",
            "training.fused_logprob",
            "verl's chunked PyTorch implementation (FusedLinearForPPO): no Triton kernel of verl's to build",
        )


def _checkpointing(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    value = ctx.spec.training.gradient_checkpointing
    if value is None:  # verl's default (on) stands, as the planner assumes
        return
    add(
        plan,
        keys,
        "key.model_gradient_checkpointing",
        value,
        "training.gradient_checkpointing",
        "recompute each layer's activations in the backward pass"
        if value
        else "keep every layer's activations: no recomputation in the backward pass",
    )


def _attention(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    attention = ctx.spec.training.attention
    if attention == "flash_attention_2":  # verl's default: nothing to set
        return
    add(
        plan,
        keys,
        "key.model_attn_implementation",
        attention,
        "training.attention",
        f"the trainer's Hugging Face model runs {attention} attention (no flash-attn package needed)",
    )
    # verl's padding removal (use_remove_padding, default on) stays on: its packed row reaches the model with
    # attention_mask None and per-sequence position ids, from which transformers >= 4.54 builds a mask that keeps
    # the sequences apart for sdpa, eager and flex_attention (backends/verl: key.model_use_remove_padding,
    # package.packed_sequence_masks; preflight.json checks the transformers version on every node)


def _rollout(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    spec = ctx.spec
    r = spec.rollout
    add(plan, keys, "key.rollout_tp", r.tp, "rollout.tp", "tensor parallel size of each rollout replica")
    if r.ep > 1:
        add(plan, keys, "key.rollout_ep", r.ep, "rollout.ep", "expert parallel size of each rollout replica")
    add(
        plan,
        keys,
        "key.rollout_gpu_memory_utilization",
        r.gpu_memory_utilization,
        "rollout.gpu_memory_utilization",
        "share of GPU memory the engine takes (weights + KV cache)",
    )
    add(plan, keys, "key.rollout_n", r.n, "rollout.n", "responses per prompt")
    # unset: verl's own defaults stand (the planner reads the same values from the verl profile)
    for field, why in (
        ("max_model_len", "longest sequence the engine serves; vLLM keeps KV room for one request of it"),
        ("max_num_seqs", "sequences each replica runs at once"),
        ("max_num_batched_tokens", "tokens one engine step processes"),
    ):
        value = getattr(r, field)
        if value is not None:
            add(plan, keys, f"key.rollout_{field}", value, f"rollout.{field}", why)
    if r.sync_bucket_mb is not None:
        add(
            plan,
            keys,
            "key.rollout_sync_bucket_megabytes",
            r.sync_bucket_mb,
            "rollout.sync_bucket_mb",
            "MiB of each weight-sync bucket the trainer fills and the engine reads",
        )
    add(
        plan,
        keys,
        "key.calculate_log_probs",
        r.calculate_log_probs,
        "rollout.calculate_log_probs",
        "the engine returns its own log-probs; every mismatch correction divides by them",
    )
    if spec.linear.quantize:
        add(
            plan,
            keys,
            "key.rollout_quantization",
            "fp8",
            "linear.quantize",
            "verl builds a 128x128 block FP8 quantization config for the engine and re-quantizes the BF16 "
            "weights at every weight sync",
        )


def _correction(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    c = ctx.spec.correction
    if c.method == "none":
        add(plan, keys, "key.rollout_is", None, "correction.method", "no importance-sampling correction")
    else:
        level, kind = _CORRECTION[c.method]
        add(
            plan,
            keys,
            "key.rollout_is",
            level,
            "correction.method",
            f"{c.method}: importance weights per {level}",
        )
        if kind == "clip":
            add(
                plan,
                keys,
                "key.rollout_is_threshold",
                float(c.clip),
                "correction.clip",
                f"truncate the importance ratio at C = {c.clip:g}",
            )
        else:
            assert c.bounds is not None  # mask / seq_mask need bounds (the spec model checks)
            low, high = c.bounds
            # verl parses "low_high" strings as IcePop bounds; quoted so Hydra keeps it a string.
            add(
                plan,
                keys,
                "key.rollout_is_threshold",
                f"{low:g}_{high:g}",
                "correction.bounds",
                f"mask tokens whose ratio is outside [{low:g}, {high:g}]",
            )
    if c.rejection:
        add(plan, keys, "key.rollout_rs", c.rejection, "correction.rejection", "rejection sampling options")
        if c.rejection_threshold:
            add(
                plan,
                keys,
                "key.rollout_rs_threshold",
                c.rejection_threshold,
                "correction.rejection_threshold",
                "rejection sampling threshold",
            )


def _algorithm(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    a = ctx.spec.algorithm
    add(
        plan,
        keys,
        "key.adv_estimator",
        "grpo",
        "algorithm.name",
        "group-relative advantages (GRPO; DAPO uses the same estimator)",
    )
    add(plan, keys, "key.actor_lr", float(a.lr), "algorithm.lr", "actor learning rate")
    add(
        plan,
        keys,
        "key.data_train_batch_size",
        a.train_batch_size,
        "algorithm.train_batch_size",
        "prompts per step",
    )
    add(
        plan,
        keys,
        "key.ppo_mini_batch_size",
        a.ppo_mini_batch_size,
        "algorithm.ppo_mini_batch_size",
        "prompts per optimizer step",
    )
    if a.name == "dapo":
        add(plan, keys, "key.use_kl_loss", False, "algorithm.name", "DAPO trains without a KL loss")
        add(plan, keys, "key.clip_ratio_low", 0.2, "algorithm.name", "DAPO clip-higher: lower clip 0.2")
        add(plan, keys, "key.clip_ratio_high", 0.28, "algorithm.name", "DAPO clip-higher: upper clip 0.28")
        add(plan, keys, "key.loss_agg_mode", "token-mean", "algorithm.name", "DAPO token-level loss")
        add(
            plan,
            keys,
            "key.dapo_filter_groups",
            True,
            "algorithm.name",
            "DAPO dynamic sampling: drop prompt groups whose responses all score the same",
        )


def _offload(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec, trainer: str) -> None:
    offload = ctx.spec.training.offload
    for field, on, why in (
        ("params", offload.params, "trainer parameters leave the GPU while the rollout runs"),
        ("optimizer", offload.optimizer, "optimizer state stays on CPU outside the step"),
    ):
        if on:  # verl's default is false: set only what the spec turns on
            add(
                plan,
                keys,
                f"key.{trainer}_{'param' if field == 'params' else field}_offload",
                True,
                f"training.offload.{field}",
                why,
            )


def _data_and_trainer(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec, trainer: str) -> None:
    spec = ctx.spec
    add(plan, keys, "key.data_train_files", spec.data.train_files, "data.train_files", "training data")
    if spec.data.val_files is not None:
        add(plan, keys, "key.data_val_files", spec.data.val_files, "data.val_files", "validation data")
    add(
        plan,
        keys,
        "key.data_max_prompt_length",
        spec.rollout.max_prompt_length,
        "rollout.max_prompt_length",
        "longest prompt in tokens",
    )
    add(
        plan,
        keys,
        "key.data_max_response_length",
        spec.rollout.max_response_length,
        "rollout.max_response_length",
        "longest response in tokens",
    )
    add(plan, keys, "key.trainer_nnodes", spec.hardware.nodes, "hardware.nodes", "nodes in the Ray cluster")
    add(
        plan,
        keys,
        "key.trainer_n_gpus_per_node",
        spec.hardware.gpus_per_node,
        "hardware.gpus_per_node",
        "GPUs per node",
    )
    add(
        plan,
        keys,
        "key.trainer_total_epochs",
        spec.algorithm.total_epochs,
        "algorithm.total_epochs",
        "passes over the training data",
    )
