"""The FP8-RL spec as a typed model.

Field names are a public contract (specs in the wild use them): add fields, never rename them.
Defaults reproduce the FP8-RL paper's recipe: blockwise 128x128 E4M3 with FP32 scales, router,
lm_head, embeddings and norms kept in BF16, token-level TIS with C=2.
Semantic checks (divisibility, hardware, backend versions) live in fp8spec.rules, not here:
the model only says what a well-formed spec looks like.
"""

from __future__ import annotations

import typing
from functools import lru_cache
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints,
                      field_validator, model_validator)

from fp8spec.hardware import GPU_NAMES
from fp8spec.targets import ENGINES, TRAINERS
from fp8spec.spec.text import check_value

SYMBOLIC_EXCLUSIONS = ("lm_head", "embeddings", "norms", "router")

# Bounds keep absurd numbers (1e400, 2**80 GPUs) out of the arithmetic the rules do.
PositiveCount = Annotated[int, Field(ge=1, le=1_000_000)]
SmallCount = Annotated[int, Field(ge=1, le=4096)]
NonNegLayers = Annotated[int, Field(ge=0, le=10_000)]
Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$", max_length=40)]
CudaVersion = Annotated[str, StringConstraints(pattern=r"^[0-9]{2}\.[0-9]{1,2}$")]


# Values flow into Hydra overrides, shell and YAML: fp8spec.spec.text says which characters are refused
# (controls, line separators, bidi and other invisible characters) and why; no OmegaConf interpolation.
_plain_text = check_value

NonEmpty = Annotated[str, StringConstraints(min_length=1, max_length=4096), AfterValidator(_plain_text)]


def _absolute(value: str) -> str:
    # Ray workers run in a temporary working_dir on every node: a relative folder would land there and vanish.
    if not value.startswith("/"):
        raise ValueError("must be an absolute path (start with '/') on storage every node shares")
    return value


AbsolutePath = Annotated[NonEmpty, AfterValidator(_absolute)]
# Names verl looks up in its registries (loggers, reward managers): checked against the verl profile by rules.
RegistryName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
PythonName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
LayerCount = Annotated[int, Field(ge=1, le=10_000)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, ge=-1e9, le=1e9)]


def _exactly_int(value: Any) -> Any:
    # Literal[1] alone would take True and 1.0 (they compare equal to 1).
    if type(value) is not int:
        raise ValueError(f"must be the integer 1, not {type(value).__name__} {value!r}")
    return value


def _strings_in(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_in(key)
            yield from _strings_in(item)


def _is_tuple(annotation: Any) -> bool:
    return typing.get_origin(annotation) is tuple or any(_is_tuple(a) for a in typing.get_args(annotation))


class _Section(BaseModel):
    """Every section is strict (no bool for a number, no text for a number, no number for text, booleans only
    true/false) and every string in it, in any field added later too, follows fp8spec.spec.text's rule."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _lists_as_tuples(cls, value: Any, info) -> Any:
        # YAML has lists, not tuples; strict mode would refuse a list for a fixed-length tuple field.
        if isinstance(value, list) and _is_tuple(cls.model_fields[info.field_name].annotation):
            return tuple(value)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _text_rule(cls, value: Any) -> Any:
        # The typed aliases (NonEmpty, ...) check their own strings with item-level locations; this catches a
        # string in any field that does not use them.
        for text in _strings_in(value):
            check_value(text)
        return value


class ModelSection(_Section):
    name: NonEmpty = Field(description="Model id from fp8spec's catalog (`fp8spec models`), e.g. "
                           "Qwen/Qwen3-30B-A3B-Base; with config_path, any name for the local model.")
    config_path: Optional[NonEmpty] = Field(
        None, description="Local Hugging Face config.json that replaces the catalog entry (read offline)."
    )
    path: NonEmpty = Field(description="Where the BF16 weights live on the cluster: a Hugging Face model folder "
                           "on every node (the preflight fails when it is missing), or a hub id with from_hub "
                           "(actor_rollout_ref.model.path; the model argument of a standalone server).")
    from_hub: bool = Field(False, description="model.path is a Hugging Face hub id that verl downloads, not a "
                           "folder: the preflight does not look for it on the nodes. Default false.")


class HardwareSection(_Section):
    gpu: Literal[GPU_NAMES] = Field(description="The TARGET GPU model; FP8 formats and scale types are checked "
                                    "against it, never against the machine running fp8spec.")
    nodes: SmallCount = Field(1, description="Nodes in the Ray cluster (trainer.nnodes). Default 1.")
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] = Field(
        8, description="GPUs per node; the trainer uses all of them and the rollout engine shares them "
        "(trainer.n_gpus_per_node). Default 8.")
    cuda: CudaVersion = Field("12.9", description="CUDA version of the cluster's torch build (torch.version.cuda), "
                              "quoted: \"12.9\". Blockwise FP8 training needs 12.9 or newer. Default \"12.9\".")


class LinearSection(_Section):
    quantize: bool = Field(True, description="W8A8 FP8 for the rollout engine's linear layers, re-quantized from "
                           "the trainer's BF16 weights at every sync (actor_rollout_ref.rollout.quantization; "
                           "--quantization when served alone). Default true.")
    format: Literal["e4m3"] = Field(
        "e4m3", description="FP8 element format of the quantized weights and activations: E4M3, the only one "
        "the engines' block FP8 linears take. Default e4m3.")
    block_size: tuple[Annotated[int, Field(ge=1, le=4096)], Annotated[int, Field(ge=1, le=4096)]] = Field(
        (128, 128), description="[rows, columns] of the weight tile that shares one scale, in elements; verl "
        "0.9.1 quantizes with [128, 128] only (rule BLK002). Default [128, 128].")
    scale_dtype: Literal["fp32", "ue8m0"] = Field(
        "fp32", description="Block scale format: fp32 = amax/448; ue8m0 = 2^ceil(log2(amax/448)), a power of two "
        "(the engine's DeepGEMM E8M0 switch, e.g. env VLLM_USE_DEEP_GEMM_E8M0, and TransformerEngine's "
        "NVTE_FP8_BLOCK_SCALING_FP32_SCALES). Default fp32; Blackwell needs ue8m0."
    )
    exclude: list[NonEmpty] = Field(
        default_factory=lambda: list(SYMBOLIC_EXCLUSIONS),
        description="Kept in BF16: symbolic groups lm_head, embeddings, norms, router, or anchored patterns "
        "over checkpoint module names ('*' spans dots; 're:' prefix for a regex).",
    )
    bf16_first_layers: NonNegLayers = Field(
        0, description="Decoder layers at the start kept in BF16: left out of the rollout's FP8 linears and, "
        "with FP8 training, Megatron's num_layers_at_start_in_bf16 (override_transformer_config). Default 0.")
    bf16_last_layers: NonNegLayers = Field(
        0, description="Decoder layers at the end kept in BF16, as bf16_first_layers "
        "(override_transformer_config.num_layers_at_end_in_bf16). Default 0.")
    sync_quantizer: Literal["auto", "verl", "fp8spec"] = Field(
        "auto",
        description="Which kernel re-quantizes the BF16 weights to blockwise FP8 at every weight sync. verl: "
        "verl's per-tensor scaled_fp8_blockwise. fp8spec: the runtime patch fast_block_quant (one launch per "
        "received bucket, IEEE-exact scales; Qwen3-30B-A3B sync 4.94 s -> 3.06 s on an H200, BENCHMARKS.md 4.3). "
        "auto (default): fp8spec on the stacks where it was run in the real engine (vLLM 0.24.0 under verl "
        "0.9.1), verl elsewhere. Only with linear.quantize.",
    )
    deep_gemm: Optional[bool] = Field(
        None,
        description="Whether vLLM runs the block-FP8 linears on DeepGEMM (env VLLM_USE_DEEP_GEMM). DeepGEMM "
        "compiles its kernels when the engine starts (894 shapes, about 10 minutes for a fresh node on an "
        "H200) and was +8 % on Qwen3-8B, -7 % on Qwen3-30B-A3B rollouts (BENCHMARKS.md 4.1). Unset (default): "
        "vLLM's default, on where supported. vLLM only (rule BLK004); only with linear.quantize.",
    )


class KVCacheSection(_Section):
    dtype: Literal["bf16", "fp8_e4m3", "fp8_e5m2"] = Field(
        "bf16", description="KV-cache element type of the rollout engine (engine_kwargs.<engine>.kv_cache_dtype; "
        "--kv-cache-dtype when served alone); FP8 halves the bytes per token. Default bf16.")
    recalibrate: Literal["per_step", "once", "none"] = Field(
        "per_step", description="When the FP8 KV cache's q/k/v scales are computed: per_step after every weight "
        "sync (the fp8spec runtime patch kv_scales where the engine lacks it), once (the first scales the trainer "
        "computes from real rollout data, kept: FP8SPEC_KV_RECALIBRATE=once), or none (scales 1.0). Only read "
        "with an FP8 dtype. Default per_step."
    )


class CorrectionSection(_Section):
    method: Literal["none", "tis", "seq_tis", "mask", "seq_mask"] = Field(
        "tis",
        description="tis = token-level truncated IS (paper, C=2); seq_tis = sequence-level truncated IS; "
        "mask / seq_mask = masked IS (IcePop) with [low, high] bounds; none = no correction "
        "(algorithm.rollout_correction.rollout_is). Default tis.",
    )
    clip: FiniteFloat = Field(2.0, description="Truncation threshold C of the importance ratio for tis / seq_tis "
                              "(algorithm.rollout_correction.rollout_is_threshold). Default 2.0, the paper's.")
    bounds: Optional[tuple[FiniteFloat, FiniteFloat]] = Field(
        None, description="[low, high] ratio band kept by mask / seq_mask "
        "(algorithm.rollout_correction.rollout_is_threshold as 'low_high'). No default: the mask methods need it.")
    rejection: Optional[NonEmpty] = Field(
        None, description="verl rejection-sampling option(s), comma-separated, e.g. seq_mean_k1 "
        "(algorithm.rollout_correction.rollout_rs). Default: off."
    )
    rejection_threshold: Optional[NonEmpty] = Field(
        None, description="Threshold(s) for correction.rejection, comma-separated as verl takes them "
        "(algorithm.rollout_correction.rollout_rs_threshold). Default: verl's.")


class ParallelSection(_Section):
    tp: SmallCount = Field(1, description="Megatron tensor parallel size of the trainer "
                           "(actor.megatron.tensor_model_parallel_size). Default 1.")
    pp: SmallCount = Field(1, description="Megatron pipeline parallel size "
                           "(actor.megatron.pipeline_model_parallel_size). Default 1.")
    ep: SmallCount = Field(1, description="Megatron expert parallel size, MoE models only "
                           "(actor.megatron.expert_model_parallel_size). Default 1.")
    cp: SmallCount = Field(1, description="Megatron context parallel size: each sequence split over cp GPUs "
                           "(actor.megatron.context_parallel_size). Default 1.")
    etp: Optional[SmallCount] = Field(
        None,
        description="Expert tensor parallel size (actor.megatron.expert_tensor_parallel_size). Default: 1 for an "
        "MoE model with ep > 1, otherwise Megatron's own default (= tp). Megatron needs etp*ep*pp to divide "
        "the GPU count.",
    )
    first_stage_layers: Optional[LayerCount] = Field(
        None,
        description="Decoder layers on the first pipeline stage, for models whose layer count pp does not "
        "divide (Megatron num_layers_in_first_pipeline_stage). Default: an even split.",
    )
    last_stage_layers: Optional[LayerCount] = Field(
        None,
        description="Decoder layers on the last pipeline stage (Megatron num_layers_in_last_pipeline_stage). "
        "Default: an even split.",
    )


class OffloadSection(_Section):
    params: bool = Field(False, description="verl param_offload: the trainer's parameters (and Megatron's gradient "
                         "buffers) go to CPU while the rollout engine runs.")
    optimizer: bool = Field(False, description="verl optimizer_offload: optimizer state stays on CPU except for the "
                            "optimizer step.")


class TrainingSection(_Section):
    backend: Literal[TRAINERS] = Field(
        "fsdp", description="verl's trainer engine: fsdp, or megatron (model_engine=megatron); `--backend` "
        "retargets it. Default fsdp.")
    precision: Literal["bf16", "fp8"] = Field(
        "bf16", description="bf16: FP8 in the rollout only; fp8: end-to-end FP8 training with TransformerEngine, "
        "Megatron only (override_transformer_config.fp8). Default bf16.")
    fp8_recipe: Literal["hybrid", "e4m3"] = Field(
        "hybrid", description="FP8 formats of FP8 training: hybrid = E4M3 forward, E5M2 gradients; e4m3 "
        "everywhere (override_transformer_config.fp8). Default hybrid, the paper's.")
    fp8_scaling: Literal["blockwise", "tensorwise", "delayed", "mxfp8"] = Field(
        "blockwise", description="How TransformerEngine scales FP8 training tensors: blockwise (128x128 weight "
        "blocks; Hopper or newer, CUDA 12.9), tensorwise, delayed, or mxfp8 (Blackwell) "
        "(override_transformer_config.fp8_recipe and override_optimizer_config.fp8_recipe). Default blockwise.")
    router_dtype: Literal["bf16", "fp32"] = Field(
        "bf16", description="Precision of the MoE router in Megatron training; fp32 sets "
        "override_transformer_config.moe_router_dtype (the engines route in bf16, rule TRN004). Default bf16.")
    router_replay: Literal["disabled", "R2", "R3"] = Field(
        "disabled",
        description="MoE router replay (Megatron trainer; actor.megatron.router_replay.mode): R2 replays the "
        "routes of the trainer's own old-log-prob pass in the update; R3 replays the rollout engine's routes "
        "(also sets rollout.enable_rollout_routing_replay). Default: disabled.",
    )
    attention: Literal["flash_attention_2", "sdpa", "eager"] = Field(
        "flash_attention_2",
        description="Attention kernels of the FSDP trainer's Hugging Face model "
        "(model.override_config.attn_implementation): flash_attention_2 needs the flash-attn package on every "
        "node; sdpa (PyTorch's own) needs nothing more and turns off verl's padding removal "
        "(model.use_remove_padding), whose packed rows flash-attn's variable-length kernels keep apart. The "
        "Megatron trainer uses TransformerEngine's attention (rule TRN005). Default flash_attention_2, verl's.")
    parallel: ParallelSection = Field(
        default_factory=ParallelSection,
        description="The Megatron trainer's parallel layout (actor.megatron.*); the FSDP trainer shards over all "
        "GPUs and ignores it (rule PAR007).")
    offload: OffloadSection = Field(
        default_factory=OffloadSection,
        description="What the trainer moves to CPU while the colocated rollout engine runs.")


class RolloutSection(_Section):
    engine: Literal[ENGINES] = Field(
        "vllm", description="Rollout engine: vllm or sglang (actor_rollout_ref.rollout.name); `--backend` "
        "retargets it. Default vllm.")
    tp: SmallCount = Field(
        1, description="GPUs per rollout replica, tensor parallel (rollout.tensor_model_parallel_size; "
        "--tensor-parallel-size / --tp-size when served alone). Default 1.")
    pp: SmallCount = Field(1, description="Pipeline parallel size of the engine; verl supports 1 only "
                           "(rule PAR003). Default 1.")
    ep: SmallCount = Field(
        1, description="Expert parallel size of each replica for MoE models, tp x dp "
        "(rollout.expert_parallel_size). Default 1 (off).")
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        0.6, description="Share of each GPU's memory the engine takes for weights, activations and KV cache, "
        "0 to 1 (rollout.gpu_memory_utilization; --gpu-memory-utilization / --mem-fraction-static when served "
        "alone). Default 0.6.")
    n: SmallCount = Field(16, description="Responses sampled per prompt (rollout.n). Default 16.")
    max_prompt_length: PositiveCount = Field(
        2048, description="Longest prompt, in tokens (data.max_prompt_length). Default 2048.")
    max_response_length: PositiveCount = Field(
        20480, description="Longest response, in tokens (data.max_response_length; the DAPO reward's "
        "max_resp_len). Default 20480, the paper's.")
    calculate_log_probs: bool = Field(True, description="Return rollout log-probs; every correction needs them.")


class AlgorithmSection(_Section):
    name: Literal["grpo", "dapo"] = Field(
        "grpo", description="grpo, or dapo: GRPO advantages either way (algorithm.adv_estimator); dapo adds "
        "clip-higher (clip_ratio_low 0.2, clip_ratio_high 0.28), token-mean loss, no KL loss and dynamic "
        "sampling (algorithm.filter_groups). Default grpo.")
    train_batch_size: PositiveCount = Field(
        128, description="Prompts per step, each with rollout.n responses (data.train_batch_size). Default 128.")
    ppo_mini_batch_size: PositiveCount = Field(
        32, description="Prompts per optimizer step (actor.ppo_mini_batch_size). Default 32.")
    ppo_micro_batch_size_per_gpu: SmallCount = Field(
        1, description="Sequences per GPU in one forward/backward pass without dynamic batching "
        "(actor.ppo_micro_batch_size_per_gpu). Default 1.")
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
        "Default: ppo_max_token_len_per_gpu.",
    )
    ref_log_prob_max_token_len_per_gpu: Optional[PositiveCount] = Field(
        None,
        description="Token budget per GPU of the reference-policy pass (ref.log_prob_max_token_len_per_gpu). "
        "Default: log_prob_max_token_len_per_gpu.",
    )
    lr: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = Field(
        1e-6, description="Actor learning rate (actor.optim.lr). Default 1e-6.")
    total_epochs: SmallCount = Field(1, description="Passes over the training data (trainer.total_epochs). "
                                     "Default 1.")


class DataSection(_Section):
    train_files: Union[NonEmpty, list[NonEmpty]] = Field(description="Training parquet file(s) on the cluster "
                                                          "(data.train_files).")
    val_files: Union[NonEmpty, list[NonEmpty], None] = Field(
        None, description="Validation parquet file(s) on the cluster (data.val_files); verl 0.9.1 always builds "
        "a validation set, so a run needs them.")


class TrainerSection(_Section):
    """How the run keeps its state: checkpoints, resumption, validation, logging, length."""

    checkpoint_dir: Optional[AbsolutePath] = Field(
        None,
        description="Absolute folder on storage every node shares; checkpoints go to <checkpoint_dir>/"
        "global_step_N and resuming reads the newest one there (trainer.default_local_dir). Required.",
    )
    save_freq: PositiveCount = Field(
        5, description="Steps between checkpoints; the last step is always saved (trainer.save_freq). "
        "Default 5, as the verl FP8 recipes.")
    keep_checkpoints: Optional[PositiveCount] = Field(
        5, description="Newest checkpoints kept, older ones deleted; null keeps all "
        "(trainer.max_actor_ckpt_to_keep). Default 5, as the verl FP8 recipes.")
    resume: Literal["auto", "disable", "resume_path"] = Field(
        "auto", description="auto: continue from the newest checkpoint in checkpoint_dir if there is one; "
        "disable: start fresh; resume_path: continue from resume_from (trainer.resume_mode). Default auto.")
    resume_from: Optional[AbsolutePath] = Field(
        None, description="A .../global_step_N checkpoint folder, with resume: resume_path "
        "(trainer.resume_from_path).")
    test_freq: PositiveCount = Field(
        10, description="Steps between validations on data.val_files; the last step always validates "
        "(trainer.test_freq). Default 10, as the verl FP8 recipes.")
    val_before_train: bool = Field(
        True, description="Validate once before the first step (trainer.val_before_train). Default true.")
    total_steps: Optional[PositiveCount] = Field(
        None, description="Stop after this many steps (trainer.total_training_steps); the run ends at whichever "
        "comes first, these steps or algorithm.total_epochs. Default: the epochs decide.")
    loggers: list[RegistryName] = Field(
        default_factory=lambda: ["console"],
        description="verl tracking backends (trainer.logger), e.g. console, wandb, tensorboard, mlflow; each "
        "needs its own credentials on the cluster. Default [console].",
    )
    project: NonEmpty = Field("fp8spec", description="Tracking project (trainer.project_name). Default fp8spec.")
    experiment: Optional[NonEmpty] = Field(
        None, description="Run name in the tracker (trainer.experiment_name). Default: the spec's name.")


class CustomRewardFunction(_Section):
    path: NonEmpty = Field(
        description="Python file with the reward function, relative to the spec file or absolute; fp8spec copies "
        "it into the bundle and verl loads it from there (reward.custom_reward_function.path).")
    name: PythonName = Field(
        "compute_score", description="Function in that file (reward.custom_reward_function.name). "
        "Default compute_score.")


class RewardSection(_Section):
    manager: RegistryName = Field(
        "naive", description="verl reward manager (reward.reward_manager.name): naive, dapo, and the others "
        "verl ships. Default naive.")
    overlong_buffer: Optional[PositiveCount] = Field(
        None, description="DAPO soft overlong punishment (manager dapo): the last this many tokens before "
        "max_response_length get a linearly growing penalty (reward.reward_kwargs.overlong_buffer_cfg.len). "
        "Default: off.")
    overlong_penalty: Annotated[float, Field(gt=0.0, le=1e6, allow_inf_nan=False)] = Field(
        1.0, description="Penalty at max_response_length, in reward units "
        "(reward.reward_kwargs.overlong_buffer_cfg.penalty_factor). Default 1.0.")
    custom_function: Optional[CustomRewardFunction] = Field(
        None, description="Your own reward function instead of verl's built-in scorers for data_source.")


# NonEmpty (no control characters, no '${') with a pattern; the pattern stays visible in the JSON Schema.
def _patterned(pattern: str, max_length: int):
    return Annotated[str, StringConstraints(min_length=1, max_length=max_length, pattern=pattern),
                     AfterValidator(_plain_text)]


# Written into #SBATCH lines (sbatch parses them itself): no blanks, quotes, '$' or backslashes.
SlurmName = _patterned(r"^[A-Za-z0-9_.,:+-]+$", 200)
SbatchOption = _patterned(r"^--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=+/@%&|!*\[\]-]+)?$", 200)
K8sLabel = _patterned(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", 63)
K8sQuantity = _patterned(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$", 32)


class SlurmSettings(_Section):
    partition: Optional[SlurmName] = Field(
        None, description="Slurm partition (#SBATCH --partition). Default: the cluster's default partition.")
    account: Optional[SlurmName] = Field(
        None, description="Slurm account (#SBATCH --account). Default: the user's default account.")
    time_limit: Annotated[str, StringConstraints(pattern=r"^[0-9:-]{1,16}$")] = Field(
        "24:00:00", description="Wall-clock limit of the job (#SBATCH --time), e.g. 48:00:00 or 2-00:00:00. "
        "Default 24:00:00.")
    extra_sbatch: list[SbatchOption] = Field(
        default_factory=list,
        description="More #SBATCH options, one '--name=value' each, names in full (e.g. --qos=high, "
        "--mem=0). Nodes, GPUs, tasks, --exclusive, partition, account, time and job name come from the spec; "
        "options that change that layout are refused (rule LCH001).",
    )



AbsPath = _patterned(r"^/[^\\]*$", 1024)
K8sName = _patterned(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", 253)  # DNS-1123 subdomain (PVC, Secret names)
EnvName = _patterned(r"^[A-Za-z_][A-Za-z0-9_]*$", 128)
SecretKey = _patterned(r"^[-._a-zA-Z0-9]+$", 253)
# One Hydra override appended to launch.sh in the RayJob entrypoint ([+|++|~]dotted.key=value).
HydraOverride = _patterned(r"^(\+{1,2}|~)?[A-Za-z_][A-Za-z0-9_.@/-]*(=.*)?$", 4096)


class KubeRayVolume(_Section):
    """A volume mounted at the same path in the head and every worker pod (model, data, checkpoints)."""

    name: K8sLabel = Field(description="Volume name in the pod spec (a DNS-1123 label).")
    mount_path: AbsPath = Field(description="Where the pods see it, e.g. /models (spec paths under it resolve).")
    host_path: Optional[AbsPath] = Field(None, description="A folder on the Kubernetes node (hostPath).")
    pvc: Optional[K8sName] = Field(None, description="A PersistentVolumeClaim name in the namespace.")
    read_only: bool = Field(False, description="Mount it read-only (model and data folders). Default false.")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.host_path is None) == (self.pvc is None):
            raise ValueError("set exactly one of host_path and pvc")
        return self


class SecretEnv(_Section):
    """An environment variable of the head and worker pods read from a Kubernetes Secret (HF token, logger keys)."""

    env: EnvName = Field(description="The environment variable's name in the pods, e.g. HF_TOKEN or WANDB_API_KEY.")
    secret: K8sName = Field(description="Secret name in the namespace.")
    key: SecretKey = Field(description="Key inside the Secret.")


class KubeRaySettings(_Section):
    image: Optional[NonEmpty] = Field(
        None, description="Image of the head, worker and submitter pods. Default: verl's published image for the "
        "pinned rollout engine version (backends/verl/<version>.yaml, images.kuberay); an engine version with "
        "no published image needs this field.")
    volumes: list[KubeRayVolume] = Field(
        default_factory=list, description="Volumes (hostPath or PVC) mounted in the head and worker pods: the "
        "folders holding model.path, the data files and the checkpoint folder.")
    secret_env: list[SecretEnv] = Field(
        default_factory=list, description="Environment variables of the head and worker pods from Kubernetes "
        "Secrets, by name (e.g. HF_TOKEN, WANDB_API_KEY); never written into the bundle.")
    extra_overrides: list[HydraOverride] = Field(
        default_factory=list, description="Hydra overrides appended to launch.sh in the RayJob entrypoint "
        "(after fp8spec's, so they win), e.g. trainer.default_local_dir=/checkpoints/run1.")
    namespace: K8sLabel = Field("default", description="Kubernetes namespace (a DNS-1123 label).")
    ray_version: Optional[Version] = Field(
        None, description="Ray version inside the image (rayClusterSpec.rayVersion); left out when unset."
    )
    head_cpus: K8sQuantity = Field("4",
                                   description="CPU request and limit of the head pod (it runs no Ray work).")
    head_memory: K8sQuantity = Field("16Gi", description="Memory request and limit of the head pod.")
    worker_cpus: Optional[K8sQuantity] = Field(None,
                                               description="CPU request and limit of each GPU worker pod.")
    worker_memory: Optional[K8sQuantity] = Field(None,
                                                 description="Memory request and limit of each GPU worker pod.")

    @field_validator("volumes")
    @classmethod
    def _distinct_volumes(cls, volumes: list[KubeRayVolume]) -> list[KubeRayVolume]:
        for attr in ("name", "mount_path"):
            values = [getattr(v, attr) for v in volumes]
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"volume {attr} {twice[0]!r} is used twice")
        return volumes

    @field_validator("secret_env")
    @classmethod
    def _distinct_env(cls, items: list[SecretEnv]) -> list[SecretEnv]:
        names = [i.env for i in items]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"env {twice[0]!r} is set twice")
        return items


class ClusterSection(_Section):
    launcher: Literal["ray", "slurm", "kuberay"] = Field(
        "ray", description="The launcher the bundle README tells you to run: ray (submit.sh, `ray job submit`), "
        "slurm (slurm.sbatch) or kuberay (rayjob.yaml); all three are generated. Default ray.")
    address: NonEmpty = Field("http://127.0.0.1:8265", description="Ray dashboard address submit.sh passes to "
                              "`ray job submit --address`. Default http://127.0.0.1:8265.")
    working_dir: NonEmpty = Field(".", description="Folder uploaded as the Ray job's working_dir (runtime_env.yaml), "
                                  "relative to the bundle. Default '.', the bundle itself.")
    slurm: SlurmSettings = Field(default_factory=SlurmSettings, description="Job options of slurm.sbatch.")
    kuberay: KubeRaySettings = Field(default_factory=KubeRaySettings,
                                     description="Pods and image of the KubeRay RayJob (rayjob.yaml).")


@lru_cache(maxsize=1)
def default_stack() -> dict[str, str]:
    """The tested stack, kept as data in backends/stack.yaml."""
    from ruamel.yaml import YAML

    from fp8spec.resources import data_dir

    with open(data_dir("backends") / "stack.yaml", encoding="utf-8") as fh:
        return {str(k): str(v) for k, v in YAML(typ="safe").load(fh).items()}


class StackSection(_Section):
    verl: Version = Field(default_factory=lambda: default_stack()["verl"],
                          description="verl release the bundle is compiled for. Default: the tested stack.")
    vllm: Version = Field(default_factory=lambda: default_stack()["vllm"],
                          description="vLLM release (used with rollout.engine vllm). Default: the one verl pins.")
    sglang: Version = Field(default_factory=lambda: default_stack()["sglang"],
                            description="SGLang release (used with rollout.engine sglang). Default: the one verl "
                            "pins.")
    megatron_core: Version = Field(default_factory=lambda: default_stack()["megatron_core"],
                                   description="megatron-core release (used with training.backend megatron). "
                                   "Default: the tested stack.")
    transformer_engine: Version = Field(default_factory=lambda: default_stack()["transformer_engine"],
                                        description="TransformerEngine release (used with training.backend "
                                        "megatron). Default: the tested stack.")


RuleCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2,4}[0-9]{3}$")]


class Spec(_Section):
    """One FP8-RL run: model, hardware, FP8 choices, correction, trainer, rollout and cluster."""

    version: Annotated[Literal[1], BeforeValidator(_exactly_int)] = Field(
        description="Spec format version: the integer 1.")
    name: Slug = Field(description="Names the bundle folder and, by default, the run in the tracker "
                       "(trainer.experiment_name): lowercase letters, digits, '.', '_', '-'.")
    model: ModelSection = Field(description="The policy model: catalog id, weights on the cluster, optional "
                                "local config.json.")
    hardware: HardwareSection = Field(description="The TARGET cluster: GPU model, nodes, GPUs per node, CUDA.")
    linear: LinearSection = Field(default_factory=LinearSection,
                                  description="FP8 W8A8 linears of the rollout engine: blockwise E4M3, re-quantized "
                                  "at every weight sync, and what stays BF16.")
    kv_cache: KVCacheSection = Field(default_factory=KVCacheSection,
                                     description="The rollout engine's KV cache precision and its scale "
                                     "calibration.")
    correction: CorrectionSection = Field(default_factory=CorrectionSection,
                                          description="Rollout/trainer mismatch correction "
                                          "(algorithm.rollout_correction).")
    training: TrainingSection = Field(default_factory=TrainingSection,
                                      description="The trainer: engine, precision and FP8 recipe, Megatron layout, "
                                      "offload, MoE router replay.")
    rollout: RolloutSection = Field(default_factory=RolloutSection,
                                    description="The rollout engine (actor_rollout_ref.rollout), or the server of a "
                                    "standalone bundle: size, memory, sampling lengths.")
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection,
                                        description="The RL algorithm, batch sizes and dynamic batching.")
    data: DataSection = Field(description="Training and validation data on the cluster.")
    trainer: TrainerSection = Field(default_factory=TrainerSection,
                                    description="Checkpoints, resumption, validation, logging and run length.")
    reward: RewardSection = Field(default_factory=RewardSection,
                                  description="The reward: a verl reward manager, DAPO's overlong shaping, or your "
                                  "own function.")
    cluster: ClusterSection = Field(default_factory=ClusterSection,
                                    description="How the bundle is launched: Ray job submission, Slurm or KubeRay.")
    stack: StackSection = Field(default_factory=StackSection,
                                description="Backend versions; each needs a profile in backends/ (rule REF002). "
                                "Default: the tested stack, backends/stack.yaml.")
    acknowledge: dict[RuleCode, NonEmpty] = Field(
        default_factory=dict,
        description="Rule codes knowingly accepted, each with a reason (only rules marked acknowledgeable).",
    )

    @property
    def world_size(self) -> int:
        return self.hardware.nodes * self.hardware.gpus_per_node

    @property
    def fp8_rollout(self) -> bool:
        return self.linear.quantize or self.kv_cache.dtype != "bf16"
