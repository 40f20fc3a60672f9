"""The spec's trainer sections: the trainer engine, its precision and module layout, parallel layout and
offload (training.*)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from fp8spec.specfile.fields import LayerCount, Section, SmallCount
from fp8spec.targets import TRAINERS

# The module classes of training.bf16_modules, in the order every listing shows them.
TRAINING_MODULE_CLASSES = ("attention", "dense_mlp", "experts", "shared_experts")


class ParallelSection(Section):
    tp: SmallCount = Field(
        1,
        description="Megatron tensor parallel size of the trainer "
        "(actor.megatron.tensor_model_parallel_size). Default 1.",
    )
    pp: SmallCount = Field(
        1,
        description="Megatron pipeline parallel size "
        "(actor.megatron.pipeline_model_parallel_size). Default 1.",
    )
    ep: SmallCount = Field(
        1,
        description="Megatron expert parallel size, MoE models only "
        "(actor.megatron.expert_model_parallel_size). Default 1.",
    )
    cp: SmallCount = Field(
        1,
        description="Megatron context parallel size: each sequence split over cp GPUs "
        "(actor.megatron.context_parallel_size). Default 1.",
    )
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


class OffloadSection(Section):
    params: bool = Field(
        False,
        description="verl param_offload: the trainer's parameters (and Megatron's gradient "
        "buffers) go to CPU while the rollout engine runs.",
    )
    optimizer: bool = Field(
        False,
        description="verl optimizer_offload: optimizer state stays on CPU except for the optimizer step.",
    )


class TrainingSection(Section):
    backend: Literal[TRAINERS] = Field(  # type: ignore[valid-type]  # pydantic expands the tuple (data)
        "fsdp",
        description="verl's trainer engine: fsdp, or megatron (model_engine=megatron); `--backend` "
        "retargets it. Default fsdp.",
    )
    precision: Literal["bf16", "fp8"] = Field(
        "bf16",
        description="bf16: FP8 in the rollout only; fp8: end-to-end FP8 training with TransformerEngine, "
        "Megatron only (override_transformer_config.fp8). Default bf16.",
    )
    fp8_recipe: Literal["hybrid", "e4m3"] = Field(
        "hybrid",
        description="FP8 formats of FP8 training: hybrid = E4M3 forward, E5M2 gradients; e4m3 "
        "everywhere (override_transformer_config.fp8). Default hybrid, the paper's.",
    )
    fp8_scaling: Literal["blockwise", "tensorwise", "delayed", "mxfp8"] = Field(
        "blockwise",
        description="How TransformerEngine scales FP8 training tensors: blockwise (128x128 weight "
        "blocks; Hopper or newer, CUDA 12.9), tensorwise, delayed, or mxfp8 (Blackwell) "
        "(override_transformer_config.fp8_recipe and override_optimizer_config.fp8_recipe). Default blockwise.",
    )
    router_dtype: Literal["bf16", "fp32"] = Field(
        "bf16",
        description="Precision of the MoE router in Megatron training; fp32 sets "
        "override_transformer_config.moe_router_dtype (the engines route in bf16, rule TRN004). Default bf16.",
    )
    bridge: Literal["mbridge", "megatron_bridge"] = Field(
        "mbridge",
        description="How verl's Megatron trainer builds the model and exports its weights to the rollout: mbridge "
        "(the mbridge package; actor.megatron.vanilla_mbridge=true) or megatron_bridge (NVIDIA Megatron-Bridge, "
        "verl's own default). Default mbridge: the stack that trained on the H200 (verl 0.9.1 pins "
        "megatron-bridge 0.5.2, which PyPI does not have; docs/results.md#rl-runs).",
    )
    router_replay: Literal["disabled", "R2", "R3"] = Field(
        "disabled",
        description="MoE router replay (Megatron trainer; actor.megatron.router_replay.mode): R2 replays the "
        "routes of the trainer's own old-log-prob pass in the update; R3 replays the rollout engine's routes "
        "(also sets rollout.enable_rollout_routing_replay). Default: disabled.",
    )
    attention: Literal["flash_attention_2", "sdpa", "eager", "flex_attention", "fused", "unfused"] = Field(
        "flash_attention_2",
        description="The trainer's attention kernels. flash_attention_2 (verl's default on both trainers) needs "
        "the flash-attn package on every node. FSDP (model.override_config.attn_implementation): sdpa (PyTorch's "
        "own) or eager need no flash-attn; verl's padding removal stays on, its packed rows kept apart by "
        "transformers' packed-sequence masks (transformers >= 4.54, checked by the preflight), one dense mask over "
        "the whole row, so keep their micro-batches to one sequence (rule PAR016). flex_attention (PyTorch's "
        "FlexAttention, compiled by PyTorch on first use in each trainer process) needs no flash-attn either and gets a "
        "block-sparse mask that skips the blocks between packed sequences, so packed micro-batches stay cheap; "
        "checked on CPU (forward), not yet run in a GPU training step. Megatron "
        "(override_transformer_config.attention_backend): fused = TransformerEngine's cuDNN attention, unfused = "
        "TE's own kernels, neither needs flash-attn (rules TRN005, TRN006). Default flash_attention_2.",
    )
    gradient_checkpointing: Optional[bool] = Field(
        None,
        description="FSDP trainer (model.enable_gradient_checkpointing): recompute each decoder layer's "
        "activations in the backward pass instead of keeping them, one more forward pass per micro-batch in "
        "exchange for activation memory of one layer's input per layer. false keeps every layer's activations: "
        "the update does less work where `fp8spec plan` says the trainer's peak still fits (rules MEM005, MEM006 "
        "check it). verl's Megatron engine does not read it (rule TRN012). Default: verl's own (true).",
    )
    fused_logprob: Optional[bool] = Field(
        None,
        description="FSDP trainer (model.use_fused_kernels with fused_kernel_options.impl_backend torch): compute "
        "each token's log-prob and entropy from the last hidden states in chunks of 512 tokens, with its own "
        "backward, instead of the full logits. Without the flash-attn package verl's default path computes the "
        "log-probs in a Python loop over the logits' rows, one log_softmax per token (benchmarks/rl_real/"
        "bench_logprob.py times both; the same log-probs on CPU). verl's Megatron engine is not compiled with it "
        "(rule TRN014). `fp8spec plan` still counts a micro-batch's full logits (an upper bound with it on). "
        "Default: verl's own (false).",
    )
    bf16_modules: list[Literal[TRAINING_MODULE_CLASSES]] = Field(  # type: ignore[valid-type]  # (data)
        default_factory=list,
        description="The per-module precision layout of FP8 training: module classes that TransformerEngine runs "
        "in BF16 while the rest trains FP8. attention (q/k/v and output projections), dense_mlp (the MLP of "
        "dense layers), experts (an MoE layer's routed experts), shared_experts. The first/last layers are "
        "linear.bf16_first_layers / bf16_last_layers, which keep them BF16 in the rollout and in training alike. "
        "Compiled into megatron-core's per-module quant_recipe by the runtime patch module_precision (verl cannot "
        "pass that object through its config). Needs training.precision fp8 on the Megatron trainer (rule "
        "TRN008). Default [] (every TransformerEngine linear in FP8).",
    )
    expert_gemm: Literal["cublas", "cutlass"] = Field(
        "cublas",
        description="How TransformerEngine runs the MoE experts' GEMMs in Megatron training. cublas (its default): "
        "one cuBLAS GEMM per expert, each set up on the host. cutlass: NVTE_USE_CUTLASS_GROUPED_GEMM=1 in every "
        "worker, one CUTLASS grouped GEMM for the BF16 experts on Hopper (forward and input gradient; FP8 experts "
        "and weight gradients keep cuBLAS): 2.0x faster BF16 on a 4-layer Qwen3-30B-A3B stack "
        "(measured:grouped_gemm.qwen3_30b_a3b.bf16_speedup), not yet run in a training loop. Rule TRN013. Default cublas.",
    )
    priority: Literal["mismatch", "speed"] = Field(
        "mismatch",
        description="What the advice of rule TRN007 and `fp8spec plan` keeps when it recommends a training "
        "layout from the measured trainer speeds: mismatch = the lowest rollout/trainer mismatch (the trained "
        "modules in the precision the rollout runs them), speed = the fastest measured layout. Changes no "
        "setting of the bundle. Default mismatch.",
    )
    parallel: ParallelSection = Field(
        default_factory=ParallelSection,
        description="The Megatron trainer's parallel layout (actor.megatron.*); the FSDP trainer shards over all "
        "GPUs and ignores it (rule PAR007).",
    )
    offload: OffloadSection = Field(
        default_factory=OffloadSection,
        description="What the trainer moves to CPU while the colocated rollout engine runs.",
    )
