"""Spec sections of the RL run itself: the algorithm and its batching, the data, the trainer's state
(checkpoints, validation, logging, length) and the reward."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field

from fp8spec.specfile.fields import (
    AbsolutePath,
    NonEmpty,
    PathText,
    PositiveCount,
    PythonName,
    RegistryName,
    Section,
    SmallCount,
)


class AlgorithmSection(Section):
    name: Literal["grpo", "dapo"] = Field(
        "grpo",
        description="grpo, or dapo: GRPO advantages either way (algorithm.adv_estimator); dapo adds "
        "clip-higher (clip_ratio_low 0.2, clip_ratio_high 0.28), token-mean loss, no KL loss and dynamic "
        "sampling (algorithm.filter_groups). Default grpo.",
    )
    train_batch_size: PositiveCount = Field(
        128,
        description="Prompts per step, each with rollout.n responses (data.train_batch_size). Default 128.",
    )
    ppo_mini_batch_size: PositiveCount = Field(
        32, description="Prompts per optimizer step (actor.ppo_mini_batch_size). Default 32."
    )
    ppo_micro_batch_size_per_gpu: SmallCount = Field(
        1,
        description="Sequences per GPU in one forward/backward pass without dynamic batching "
        "(actor.ppo_micro_batch_size_per_gpu). Default 1.",
    )
    log_prob_micro_batch_size_per_gpu: Optional[SmallCount] = Field(
        None,
        description="Sequences per GPU in the log-prob passes without dynamic batching "
        "(rollout/ref log_prob_micro_batch_size_per_gpu). Default: ppo_micro_batch_size_per_gpu.",
    )
    use_dynamic_bsz: bool = Field(
        True,
        description="Pack micro-batches by token count up to the per-GPU budgets below (actor.use_dynamic_bsz; "
        "the log-prob passes follow it). Default: on, the fit for long responses.",
    )
    ppo_max_token_len_per_gpu: Optional[PositiveCount] = Field(
        None,
        description="Token budget per GPU of one actor-update micro-batch with dynamic batching "
        "(actor.ppo_max_token_len_per_gpu). Default: max_prompt_length + max_response_length, the least that "
        "holds one full sequence.",
    )
    log_prob_max_token_len_per_gpu: Optional[PositiveCount] = Field(
        None,
        description="Token budget per GPU of the old-log-prob pass (rollout.log_prob_max_token_len_per_gpu). "
        "No gradients, but a micro-batch's full logits with the entropy's and log-probs' temporaries: `fp8spec "
        "plan` counts them, and above the update's budget they can set the training peak (MEM005). "
        "Default: ppo_max_token_len_per_gpu.",
    )
    ref_log_prob_max_token_len_per_gpu: Optional[PositiveCount] = Field(
        None,
        description="Token budget per GPU of the reference-policy pass (ref.log_prob_max_token_len_per_gpu). "
        "Default: log_prob_max_token_len_per_gpu.",
    )
    lr: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = Field(
        1e-6, description="Actor learning rate (actor.optim.lr). Default 1e-6."
    )
    total_epochs: SmallCount = Field(
        1, description="Passes over the training data (trainer.total_epochs). Default 1."
    )


class DataSection(Section):
    train_files: Union[PathText, list[PathText]] = Field(
        description="Training parquet file(s) on the cluster (data.train_files)."
    )
    val_files: Union[PathText, list[PathText], None] = Field(
        None,
        description="Validation parquet file(s) on the cluster (data.val_files); verl 0.9.1 always builds "
        "a validation set, so a run needs them.",
    )


class TrainerSection(Section):
    """How the run keeps its state: checkpoints, resumption, validation, logging, length."""

    checkpoint_dir: Optional[AbsolutePath] = Field(
        None,
        description="Absolute folder on storage every node shares; checkpoints go to <checkpoint_dir>/"
        "global_step_N and resuming reads the newest one there (trainer.default_local_dir). Required.",
    )
    save_freq: PositiveCount = Field(
        5,
        description="Steps between checkpoints; the last step is always saved (trainer.save_freq). "
        "Default 5, as the verl FP8 recipes.",
    )
    keep_checkpoints: Optional[PositiveCount] = Field(
        5,
        description="Newest checkpoints kept, older ones deleted; null keeps all "
        "(trainer.max_actor_ckpt_to_keep). Default 5, as the verl FP8 recipes.",
    )
    resume: Literal["auto", "disable", "resume_path"] = Field(
        "auto",
        description="auto: continue from the newest checkpoint in checkpoint_dir if there is one; "
        "disable: start fresh; resume_path: continue from resume_from (trainer.resume_mode). Default auto.",
    )
    resume_from: Optional[AbsolutePath] = Field(
        None,
        description="A .../global_step_N checkpoint folder, with resume: resume_path "
        "(trainer.resume_from_path).",
    )
    test_freq: PositiveCount = Field(
        10,
        description="Steps between validations on data.val_files; the last step always validates "
        "(trainer.test_freq). Default 10, as the verl FP8 recipes.",
    )
    val_before_train: bool = Field(
        True, description="Validate once before the first step (trainer.val_before_train). Default true."
    )
    total_steps: Optional[PositiveCount] = Field(
        None,
        description="Stop after this many steps (trainer.total_training_steps); the run ends at whichever "
        "comes first, these steps or algorithm.total_epochs. Default: the epochs decide.",
    )
    loggers: list[RegistryName] = Field(
        default_factory=lambda: ["console"],
        description="verl tracking backends (trainer.logger), e.g. console, wandb, tensorboard, mlflow; each "
        "needs its own credentials on the cluster. Default [console].",
    )
    project: NonEmpty = Field(
        "fp8spec", description="Tracking project (trainer.project_name). Default fp8spec."
    )
    experiment: Optional[NonEmpty] = Field(
        None, description="Run name in the tracker (trainer.experiment_name). Default: the spec's name."
    )


class CustomRewardFunction(Section):
    path: PathText = Field(
        description="Python file with the reward function, relative to the spec file or absolute; fp8spec copies "
        "it into the bundle and verl loads it from there (reward.custom_reward_function.path)."
    )
    name: PythonName = Field(
        "compute_score",
        description="Function in that file (reward.custom_reward_function.name). Default compute_score.",
    )


class RewardSection(Section):
    manager: RegistryName = Field(
        "naive",
        description="verl reward manager (reward.reward_manager.name): naive, dapo, and the others "
        "verl ships. Default naive.",
    )
    overlong_buffer: Optional[PositiveCount] = Field(
        None,
        description="DAPO soft overlong punishment (manager dapo): the last this many tokens before "
        "max_response_length get a linearly growing penalty (reward.reward_kwargs.overlong_buffer_cfg.len). "
        "Default: off.",
    )
    overlong_penalty: Annotated[float, Field(gt=0.0, le=1e6, allow_inf_nan=False)] = Field(
        1.0,
        description="Penalty at max_response_length, in reward units "
        "(reward.reward_kwargs.overlong_buffer_cfg.penalty_factor). Default 1.0.",
    )
    custom_function: Optional[CustomRewardFunction] = Field(
        None, description="Your own reward function instead of verl's built-in scorers for data_source."
    )
