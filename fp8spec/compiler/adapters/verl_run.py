"""verl: what makes a run keepable: micro-batching, checkpoints and resumption, validation, logging, reward.

Key names come from the verl profile (backends/verl/<version>.yaml), as in fp8spec.compiler.adapters.verl.
"""

from __future__ import annotations

from fp8spec.compiler.adapters.verl import VerlKeys, add
from fp8spec.compiler.settings import SettingsPlan
from fp8spec.resolve.reward import BUNDLE_NAME
from fp8spec.resolve.valid import ValidSpec


def build_batching(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    b = ctx.batching
    add(
        plan,
        keys,
        "key.use_dynamic_bsz",
        b.dynamic,
        "algorithm.use_dynamic_bsz",
        "pack micro-batches by token count instead of a fixed size (the log-prob passes follow it)",
    )
    add(
        plan,
        keys,
        "key.ppo_micro_batch_size_per_gpu",
        b.ppo_micro_batch_size_per_gpu,
        "algorithm.ppo_micro_batch_size_per_gpu",
        "sequences per GPU in an actor-update micro-batch (used when use_dynamic_bsz is off)",
    )
    for fact_id in (
        "key.rollout_log_prob_micro_batch_size_per_gpu",
        "key.ref_log_prob_micro_batch_size_per_gpu",
    ):
        add(
            plan,
            keys,
            fact_id,
            b.log_prob_micro_batch_size_per_gpu,
            "algorithm.log_prob_micro_batch_size_per_gpu",
            "sequences per GPU in a log-prob micro-batch (used when use_dynamic_bsz is off)",
        )
    if not b.dynamic:
        return
    why = (
        f"tokens per GPU in one micro-batch; holds the longest sequence ({b.sequence_tokens} = "
        "max_prompt_length + max_response_length)"
    )
    for fact_id, (field, value) in zip(
        (
            "key.ppo_max_token_len_per_gpu",
            "key.rollout_log_prob_max_token_len_per_gpu",
            "key.ref_log_prob_max_token_len_per_gpu",
        ),
        b.budgets(),
    ):
        add(plan, keys, fact_id, value, f"algorithm.{field}", why)


def build_run(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    spec = ctx.spec
    t = spec.trainer
    if t.checkpoint_dir is not None:
        add(
            plan,
            keys,
            "key.trainer_default_local_dir",
            t.checkpoint_dir,
            "trainer.checkpoint_dir",
            "checkpoints on shared storage (verl's default is relative to the Ray job's temporary working_dir)",
        )
    add(
        plan,
        keys,
        "key.trainer_save_freq",
        t.save_freq,
        "trainer.save_freq",
        "steps between checkpoints, and one at the last step (verl's default -1 saves nothing)",
    )
    if t.keep_checkpoints is not None:
        add(
            plan,
            keys,
            "key.trainer_max_actor_ckpt_to_keep",
            t.keep_checkpoints,
            "trainer.keep_checkpoints",
            "newest checkpoints kept; older ones are deleted",
        )
    add(
        plan,
        keys,
        "key.trainer_resume_mode",
        t.resume,
        "trainer.resume",
        "how a restarted job continues from checkpoint_dir",
    )
    if t.resume_from is not None:
        add(
            plan,
            keys,
            "key.trainer_resume_from_path",
            t.resume_from,
            "trainer.resume_from",
            "the checkpoint to continue from",
        )
    add(
        plan,
        keys,
        "key.trainer_test_freq",
        t.test_freq,
        "trainer.test_freq",
        "steps between validations on data.val_files, and one at the last step",
    )
    add(
        plan,
        keys,
        "key.trainer_val_before_train",
        t.val_before_train,
        "trainer.val_before_train",
        "validate once before the first step",
    )
    if t.total_steps is not None:
        add(
            plan,
            keys,
            "key.trainer_total_training_steps",
            t.total_steps,
            "trainer.total_steps",
            "stop after this many steps (or at algorithm.total_epochs, whichever comes first)",
        )
    add(plan, keys, "key.trainer_logger", list(t.loggers), "trainer.loggers", "tracking backends")
    add(plan, keys, "key.trainer_project_name", t.project, "trainer.project", "tracking project")
    add(
        plan,
        keys,
        "key.trainer_experiment_name",
        t.experiment or spec.name,
        "trainer.experiment" if t.experiment else "name",
        "run name in the tracker",
    )


def build_reward(plan: SettingsPlan, keys: VerlKeys, ctx: ValidSpec) -> None:
    spec = ctx.spec
    r = spec.reward
    add(plan, keys, "key.reward_manager_name", r.manager, "reward.manager", "reward manager verl builds")
    if r.overlong_buffer is not None:
        why = (
            f"DAPO soft overlong punishment: responses longer than {spec.rollout.max_response_length} - "
            f"{r.overlong_buffer} tokens lose up to {r.overlong_penalty:g}"
        )
        for fact_id, value, source in (
            ("key.dapo_overlong_enable", True, "reward.overlong_buffer"),
            ("key.dapo_overlong_len", r.overlong_buffer, "reward.overlong_buffer"),
            ("key.dapo_overlong_penalty_factor", float(r.overlong_penalty), "reward.overlong_penalty"),
            ("key.dapo_overlong_log", False, "reward.overlong_buffer"),
            ("key.dapo_max_resp_len", spec.rollout.max_response_length, "rollout.max_response_length"),
        ):
            add(plan, keys, fact_id, value, source, why)
    if r.custom_function is not None:
        add(
            plan,
            keys,
            "key.custom_reward_function_path",
            BUNDLE_NAME,
            "reward.custom_function.path",
            f"{r.custom_function.path}, shipped in the bundle as {BUNDLE_NAME} and loaded from the Ray "
            "working_dir (the bundle folder)",
        )
        add(
            plan,
            keys,
            "key.custom_reward_function_name",
            r.custom_function.name,
            "reward.custom_function.name",
            "reward function verl calls",
        )
