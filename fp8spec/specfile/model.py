"""The FP8-RL spec as a typed model.

Field names are a public contract (specs in the wild use them): add fields, never rename them.
Defaults reproduce the FP8-RL paper's recipe: blockwise 128x128 E4M3 with FP32 scales, router,
lm_head, embeddings and norms kept in BF16, token-level TIS with C=2.
Semantic checks (divisibility, hardware, backend versions) live in fp8spec.rules, not here:
the model only says what a well-formed spec looks like.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BeforeValidator, Field, StringConstraints

from fp8spec.hardware import GPU_NAMES
from fp8spec.specfile.cluster import ClusterSection
from fp8spec.specfile.fields import (
    CudaVersion,
    FiniteFloat,
    NonEmpty,
    NonNegLayers,
    PathText,
    PositiveCount,
    Section,
    Slug,
    SmallCount,
    either,
    exactly_int,
)
from fp8spec.specfile.run import AlgorithmSection, DataSection, RewardSection, TrainerSection
from fp8spec.specfile.stack import StackSection
from fp8spec.specfile.training import (
    TrainingSection,
)
from fp8spec.targets import ENGINES

SYMBOLIC_EXCLUSIONS = ("lm_head", "embeddings", "norms", "router")


class ModelSection(Section):
    name: NonEmpty = Field(
        description="Model id from fp8spec's catalog (`fp8spec models`), e.g. "
        "Qwen/Qwen3-30B-A3B-Base; with config_path, any name for the local model."
    )
    config_path: Optional[PathText] = Field(
        None, description="Local Hugging Face config.json that replaces the catalog entry (read offline)."
    )
    path: PathText = Field(
        description="Where the BF16 weights live on the cluster: a Hugging Face model folder "
        "on every node (the preflight fails when it is missing), or a hub id with from_hub "
        "(actor_rollout_ref.model.path; the model argument of a standalone server)."
    )
    from_hub: bool = Field(
        False,
        description="model.path is a Hugging Face hub id that verl downloads, not a "
        "folder: the preflight does not look for it on the nodes. Default false.",
    )


class HardwareSection(Section):
    gpu: Literal[GPU_NAMES] = Field(  # type: ignore[valid-type]  # pydantic expands the tuple (data)
        description="The TARGET GPU model; FP8 formats and scale types are checked "
        "against it, never against the machine running fp8spec."
    )
    nodes: SmallCount = Field(1, description="Nodes in the Ray cluster (trainer.nnodes). Default 1.")
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] = Field(
        8,
        description="GPUs per node; the trainer uses all of them and the rollout engine shares them "
        "(trainer.n_gpus_per_node). Default 8.",
    )
    cuda: CudaVersion = Field(
        "12.9",
        description="CUDA version of the cluster's torch build (torch.version.cuda), "
        'quoted: "12.9". Blockwise FP8 training needs 12.9 or newer. Default "12.9".',
    )
    gpu_memory_gib: Optional[Annotated[float, Field(gt=0, le=4096, allow_inf_nan=False)]] = Field(
        None,
        description="Memory of one GPU as CUDA reports it, in GiB (the total_memory torch prints for the "
        "device, divided by 2**30). Default: fp8spec's record for hardware.gpu (fp8spec/data/gpu_memory.yaml); "
        "a GPU without one (h800, gb200, b300, gb300) needs it for the memory rules to run (MEM008).",
    )


class LinearSection(Section):
    quantize: bool = Field(
        True,
        description="W8A8 FP8 for the rollout engine's linear layers, re-quantized from "
        "the trainer's BF16 weights at every sync (actor_rollout_ref.rollout.quantization; "
        "--quantization when served alone). Default true.",
    )
    format: Literal["e4m3"] = Field(
        "e4m3",
        description="FP8 element format of the quantized weights and activations: E4M3, the only one "
        "the engines' block FP8 linears take. Default e4m3.",
    )
    block_size: tuple[Annotated[int, Field(ge=1, le=4096)], Annotated[int, Field(ge=1, le=4096)]] = Field(
        (128, 128),
        description="[rows, columns] of the weight tile that shares one scale, in elements; verl "
        "0.9.1 quantizes with [128, 128] only (rule BLK002). Default [128, 128].",
    )
    scale_dtype: Literal["fp32", "ue8m0"] = Field(
        "fp32",
        description="Block scale format: fp32 = amax/448; ue8m0 = 2^ceil(log2(amax/448)), a power of two "
        "(the engine's DeepGEMM E8M0 switch, e.g. env VLLM_USE_DEEP_GEMM_E8M0, and TransformerEngine's "
        "NVTE_FP8_BLOCK_SCALING_FP32_SCALES). Default fp32; Blackwell needs ue8m0.",
    )
    exclude: list[NonEmpty] = Field(
        default_factory=lambda: list(SYMBOLIC_EXCLUSIONS),
        description="Kept in BF16: symbolic groups lm_head, embeddings, norms, router, or anchored patterns "
        "over checkpoint module names ('*' spans dots; 're:' prefix for a regex). A fused group is excluded "
        "whole or not at all (q/k/v, gate/up, and an MoE layer's routed experts: 'mlp.experts.*'; rule EXC003).",
    )
    bf16_first_layers: NonNegLayers = Field(
        0,
        description="Decoder layers at the start kept in BF16: left out of the rollout's FP8 linears and, "
        "with FP8 training, Megatron's num_layers_at_start_in_bf16 (override_transformer_config). Default 0.",
    )
    bf16_last_layers: NonNegLayers = Field(
        0,
        description="Decoder layers at the end kept in BF16, as bf16_first_layers "
        "(override_transformer_config.num_layers_at_end_in_bf16). Default 0.",
    )
    sync_quantizer: Literal["auto", "verl", "fp8spec", "direct"] = Field(
        "auto",
        description="Which kernel re-quantizes the BF16 weights to blockwise FP8 at every weight sync. verl: "
        "verl's per-tensor scaled_fp8_blockwise. fp8spec: the runtime patch fast_block_quant (one launch per "
        "received bucket, IEEE-exact; Qwen3-30B-A3B 4.94 -> 3.06 s, measured:sync.fast_block_quant.qwen3_30b_a3b_s). "
        "direct: the runtime patch direct_sync (vLLM only): each received bucket is quantized straight into the "
        "engine's fused and stacked FP8 parameters through a plan built once from the engine, without vLLM's "
        "per-tensor load_weights; names outside the plan go through verl's receiver, counted in the log; refused "
        "(rule BLK006) with ue8m0 scales and where the engine's profile does not record it byte-exact in the real "
        "engine (vLLM 0.24.0: shown at rollout tp 1; Qwen3-30B-A3B sync 5.9 s -> 0.12 s, Qwen3-8B 0.12 s -> "
        "0.039 s, measured:sync.qwen3_30b_a3b.direct_s, measured:sync.qwen3_8b.bf16.direct_s). "
        "auto (default): direct where the engine's profile records it byte-exact at this rollout tp and trained "
        "inside an RL loop with this trainer on this kind of model (vLLM 0.24.0: tp 1, FSDP, dense or MoE, "
        "fp32 scales); else fp8spec on the stacks where it was shown byte-exact in the real engine and has run "
        "inside an RL loop (vLLM 0.24.0 under verl 0.9.1; SGLang 0.5.12 byte-exact, docs/results.md#weight-sync, but "
        "not yet run in the loop), verl elsewhere; an explicit fp8spec where it was not shown byte-exact warns "
        "(BLK005). Only with linear.quantize.",
    )
    deep_gemm: Optional[bool] = Field(
        None,
        description="Whether vLLM runs the block-FP8 linears on DeepGEMM (env VLLM_USE_DEEP_GEMM). DeepGEMM "
        "compiles its kernels when the engine starts (894 shapes, about 10 minutes for a fresh node on an "
        "H200) and was +8 % on Qwen3-8B, -7 % on Qwen3-30B-A3B (measured:rollout.vllm.deep_gemm_ratio.*). Unset: "
        "vLLM's default, on where supported. vLLM only (rule BLK004); only with linear.quantize.",
    )


class KVCacheSection(Section):
    dtype: Literal["bf16", "fp8_e4m3", "fp8_e5m2"] = Field(
        "bf16",
        description="KV-cache element type of the rollout engine (engine_kwargs.<engine>.kv_cache_dtype; "
        "--kv-cache-dtype when served alone); FP8 halves the bytes per token. Default bf16.",
    )
    recalibrate: Literal["per_step", "once", "none"] = Field(
        "per_step",
        description="When the FP8 KV cache's q/k/v scales are computed: per_step after every weight "
        "sync (the fp8spec runtime patch kv_scales where the engine lacks it), once (the first scales the trainer "
        "computes from real rollout data, kept: FP8SPEC_KV_RECALIBRATE=once), or none (scales 1.0). Only read "
        "with an FP8 dtype. Default per_step.",
    )

    @property
    def fp8(self) -> bool:
        """An FP8 KV cache (either format)."""
        return self.dtype != "bf16"

    @property
    def recalibrating(self) -> bool:
        """An FP8 KV cache whose scales are computed from data (per_step or once), not left at 1.0."""
        return self.fp8 and self.recalibrate != "none"


class CorrectionSection(Section):
    method: Literal["none", "tis", "seq_tis", "mask", "seq_mask"] = Field(
        "tis",
        description="tis = token-level truncated IS (paper, C=2); seq_tis = sequence-level truncated IS; "
        "mask / seq_mask = masked IS (IcePop) with [low, high] bounds; none = no correction "
        "(algorithm.rollout_correction.rollout_is). Default tis.",
    )
    clip: FiniteFloat = Field(
        2.0,
        description="Truncation threshold C of the importance ratio for tis / seq_tis "
        "(algorithm.rollout_correction.rollout_is_threshold). Default 2.0, the paper's.",
    )
    bounds: Optional[tuple[FiniteFloat, FiniteFloat]] = Field(
        None,
        description="[low, high] ratio band kept by mask / seq_mask "
        "(algorithm.rollout_correction.rollout_is_threshold as 'low_high'). No default: the mask methods need it.",
    )
    rejection: Optional[NonEmpty] = Field(
        None,
        description="verl rejection-sampling option(s), comma-separated, e.g. seq_mean_k1 "
        "(algorithm.rollout_correction.rollout_rs). Default: off.",
    )
    rejection_threshold: Optional[NonEmpty] = Field(
        None,
        description="Threshold(s) for correction.rejection, comma-separated as verl takes them "
        "(algorithm.rollout_correction.rollout_rs_threshold). Default: verl's.",
    )


class RolloutSection(Section):
    engine: Literal[ENGINES] = Field(  # type: ignore[valid-type]  # pydantic expands the tuple (data)
        ENGINES[0],
        description=f"Rollout engine: {either(ENGINES)} (actor_rollout_ref.rollout.name); `--backend` "
        f"retargets it. Default {ENGINES[0]}.",
    )
    tp: SmallCount = Field(
        1,
        description="GPUs per rollout replica, tensor parallel (rollout.tensor_model_parallel_size; "
        "--tensor-parallel-size / --tp-size when served alone). Default 1.",
    )
    pp: SmallCount = Field(
        1, description="Pipeline parallel size of the engine; verl supports 1 only (rule PAR003). Default 1."
    )
    ep: SmallCount = Field(
        1,
        description="Expert parallel size of each replica for MoE models, tp x dp "
        "(rollout.expert_parallel_size). Default 1 (off).",
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        0.6,
        description="Share of each GPU's memory the engine takes for weights, activations and KV cache, "
        "0 to 1 (rollout.gpu_memory_utilization; --gpu-memory-utilization / --mem-fraction-static when served "
        "alone). Default 0.6.",
    )
    n: SmallCount = Field(16, description="Responses sampled per prompt (rollout.n). Default 16.")
    max_prompt_length: PositiveCount = Field(
        2048, description="Longest prompt, in tokens (data.max_prompt_length). Default 2048."
    )
    max_response_length: PositiveCount = Field(
        20480,
        description="Longest response, in tokens (data.max_response_length; the DAPO reward's "
        "max_resp_len). Default 20480, the paper's.",
    )
    calculate_log_probs: bool = Field(
        True, description="Return rollout log-probs; every correction needs them."
    )
    # The engine's length and batch knobs. Unset (None) keeps verl's default, so specs that leave them out
    # compile exactly as before; the planner and the MEM rules read the same effective values.
    max_model_len: Optional[PositiveCount] = Field(
        None,
        description="Longest sequence (prompt + response) the engine serves, in tokens "
        "(actor_rollout_ref.rollout.max_model_len; --max-model-len / --context-length when served alone). vLLM "
        "keeps KV room for one request of this length, so a value near max_prompt_length + max_response_length "
        "instead of the model's whole context frees KV memory. At most the model's max_position_embeddings "
        "(MDL003). Default: the model's max_position_embeddings (what verl passes).",
    )
    max_num_seqs: Optional[SmallCount] = Field(
        None,
        description="Sequences each engine replica runs at once (actor_rollout_ref.rollout.max_num_seqs; "
        "SGLang's max_running_requests; --max-num-seqs / --max-running-requests when served alone). Fewer "
        "running sequences fit the KV cache without preemption (MEM004). Default: verl's 256.",
    )
    max_num_batched_tokens: Optional[PositiveCount] = Field(
        None,
        description="Tokens one engine step processes, prefill chunks included "
        "(actor_rollout_ref.rollout.max_num_batched_tokens; SGLang: engine_kwargs.sglang.chunked_prefill_size, "
        "which verl does not derive from it; --max-num-batched-tokens / --chunked-prefill-size when served "
        "alone). vLLM profiles its activation peak at this many tokens and needs at least max_num_seqs (PAR014). "
        "Default: verl's 8192.",
    )
    sync_bucket_mb: Optional[Annotated[int, Field(ge=16, le=65536)]] = Field(
        None,
        description="MiB of one weight-sync bucket: the buffer the trainer fills and the engine reads at every "
        "sync, allocated on each trainer GPU beside the trainer's parameters and the engine's weights (its KV "
        "cache is released until the sync ends; MEM007) "
        "(actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes). Fewer, larger buckets "
        "cost less per sync: Qwen3-8B with float32 weights through the direct path, 0.050 s at 2048 and 0.040 s "
        "at 8192 on an H200 (measured:sync.qwen3_8b.fp32.direct_s_by_bucket_mb). Default: verl's 2048.",
    )


RuleCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2,4}[0-9]{3}$")]


class Spec(Section):
    """One FP8-RL run: model, hardware, FP8 choices, correction, trainer, rollout and cluster."""

    version: Annotated[Literal[1], BeforeValidator(exactly_int)] = Field(
        description="Spec format version: the integer 1."
    )
    name: Slug = Field(
        description="Names the bundle folder and, by default, the run in the tracker "
        "(trainer.experiment_name): lowercase letters, digits, '.', '_', '-'."
    )
    model: ModelSection = Field(
        description="The policy model: catalog id, weights on the cluster, optional local config.json."
    )
    hardware: HardwareSection = Field(
        description="The TARGET cluster: GPU model, nodes, GPUs per node, CUDA."
    )
    linear: LinearSection = Field(
        default_factory=LinearSection,
        description="FP8 W8A8 linears of the rollout engine: blockwise E4M3, re-quantized "
        "at every weight sync, and what stays BF16.",
    )
    kv_cache: KVCacheSection = Field(
        default_factory=KVCacheSection,
        description="The rollout engine's KV cache precision and its scale calibration.",
    )
    correction: CorrectionSection = Field(
        default_factory=CorrectionSection,
        description="Rollout/trainer mismatch correction (algorithm.rollout_correction).",
    )
    training: TrainingSection = Field(
        default_factory=TrainingSection,
        description="The trainer: engine, precision and FP8 recipe, Megatron layout, "
        "offload, MoE router replay.",
    )
    rollout: RolloutSection = Field(
        default_factory=RolloutSection,
        description="The rollout engine (actor_rollout_ref.rollout), or the server of a "
        "standalone bundle: size, memory, sampling lengths.",
    )
    algorithm: AlgorithmSection = Field(
        default_factory=AlgorithmSection, description="The RL algorithm, batch sizes and dynamic batching."
    )
    data: DataSection = Field(description="Training and validation data on the cluster.")
    trainer: TrainerSection = Field(
        default_factory=TrainerSection,
        description="Checkpoints, resumption, validation, logging and run length.",
    )
    reward: RewardSection = Field(
        default_factory=RewardSection,
        description="The reward: a verl reward manager, DAPO's overlong shaping, or your own function.",
    )
    cluster: ClusterSection = Field(
        default_factory=ClusterSection,
        description="How the bundle is launched: Ray job submission, Slurm or KubeRay.",
    )
    stack: StackSection = Field(
        default_factory=StackSection,
        description="Backend versions; each needs a profile in backends/ (rule REF002). "
        "Default: the tested stack, backends/stack.yaml.",
    )
    acknowledge: dict[RuleCode, NonEmpty] = Field(
        default_factory=dict,
        description="Rule codes knowingly accepted, each with a reason (only rules marked acknowledgeable).",
    )

    @property
    def world_size(self) -> int:
        return self.hardware.nodes * self.hardware.gpus_per_node

    @property
    def fp8_rollout(self) -> bool:
        return self.linear.quantize or self.kv_cache.fp8
