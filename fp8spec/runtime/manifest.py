"""The activation contract of the fp8spec runtime patch set, as plain data.

The compiler (``fp8spec.compiler``) reads this module to decide which patches a bundle activates and what
each needs from the engine; the engine's own key names come from its profile in backends/ (the patches name
them by fact id). Nothing here imports torch or any engine.

How a bundle activates patches (all three mechanisms already exist in verl 0.9.1 / the engines):

1. ``FP8SPEC_RUNTIME_PATCHES=<comma list of patch names>`` in the Ray runtime_env, so every Ray
   worker (trainer and rollout) and every process they spawn (vLLM workers) sees it. Unset or empty:
   importing ``fp8spec.runtime`` does nothing at all.
2. ``VERL_USE_EXTERNAL_MODULES=fp8spec.runtime`` in the same runtime_env: verl's package
   ``__init__`` imports the listed modules in every process that imports verl
   (verl 0.9.1 ``verl/__init__.py`` lines 49-52, ``import_external_libs`` in
   ``verl/utils/import_utils.py`` line 81). That includes the vLLM worker processes, which import
   verl's worker extension ``verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension``.
   (``actor_rollout_ref.model.external_lib`` is the config-level twin, imported in
   ``HFModelConfig.__post_init__``, ``verl/workers/config/model.py`` line 149, i.e. only where a
   model config is built; the env var covers more processes, so bundles use it.)
3. Engine-specific registration, which each engine's folder in the compiler declares (fp8spec/engines/<name>/:
   SGLang's ``--custom-weight-loader SGLANG_KV_LOADER`` for kv_scales) and, for vLLM without verl, the
   ``vllm.general_plugins`` entry point ``fp8spec_runtime = fp8spec.runtime.vllm_plugin:register``
   (loaded in every vLLM process, ``vllm/plugins/__init__.py`` ``DEFAULT_PLUGINS_GROUP``).
"""

from fp8spec import __version__
from fp8spec.runtime.envs import env_defaults, env_help

PATCHSET_NAME = "fp8spec-runtime"
PATCHSET_VERSION = __version__  # the patch set is released with fp8spec: one version

MODULE = "fp8spec.runtime"
# The environment variables (FP8SPEC_RUNTIME_PATCHES and every patch's knobs) are declared in envs.py.

# Versions whose source the patches were written and checked against (exact match, local suffix ignored). The
# runtime cannot read backends/ inside a GPU worker, so this copy lives here; it must equal the versions profiled
# in backends/ (tests/quality/test_backend_facts.py).
KNOWN_VERSIONS = {
    "verl": ("0.9.1",),
    "vllm": ("0.24.0", "0.33.0"),
    "sglang": ("0.5.12", "0.5.23"),
}

SGLANG_KV_LOADER = "fp8spec.runtime.kv_scales.sglang_kv.load_kv_scales"
VLLM_PLUGIN_ENTRY_POINT = (
    "vllm.general_plugins",
    "fp8spec_runtime",
    "fp8spec.runtime.vllm_plugin:register",
)
VLLM_WORKER_EXTENSION = "fp8spec.runtime.kv_scales.vllm_kv.Fp8specKVScaleWorkerExtension"

PATCHES = {
    "kv_scales": {
        "description": (
            "Per-step q/k/v FP8 KV-cache scale calibration on the trainer (post-RoPE amax from the "
            "old-log-prob and actor-update forwards, all-reduced MAX), pushed with each weight update "
            "under the engine's names model.layers.{i}.self_attn.attn.{q,k,v}_scale and applied in the "
            "engine after the weights have loaded."
        ),
        "side": ("trainer", "engine"),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "trainer_backends": ("fsdp (Hugging Face models)", "megatron"),
        # Hooks post-RoPE q/k/v of per-head attention and pushes per-layer attn.{q,k,v}_scale (kv_calibration.py).
        # MLA caches a compressed latent (kv_lora_rank + rope dims) with one scale per layer: not covered.
        "attention": ("gqa",),
        "env": env_defaults("kv_scales"),  # optional knobs, defaults shown (envs.VARIABLES)
        "notes": (
            "vLLM: prefer the FLASH_ATTN (FA3) backend on Hopper; it reads the device scale tensors, so "
            "in-place updates are CUDA-graph safe. FlashInfer bakes host floats into captured graphs. "
            "SGLang ignores q_scale for MHA. The first rollout (before any calibration) runs on the "
            "engine's default scales (1.0)."
        ),
    },
    "ue8m0_scales": {
        "description": (
            "Power-of-two (UE8M0) block scales on the weight-sync path (verl's FP8 quantizer replaced), so "
            "vLLM's DeepGEMM E8M0 re-quantization (default on Hopper, VLLM_USE_DEEP_GEMM_E8M0=1) is lossless "
            "instead of a second rounding."
        ),
        "side": ("engine-process quantizer (vLLM path)", "trainer-process quantizer (SGLang path)"),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "env": env_defaults("ue8m0_scales"),
    },
    "fast_block_quant": {
        "description": (
            "Bucketed GPU blockwise FP8 quantizer for weight sync: one Triton launch per bucket instead of "
            "verl's one launch per tensor; bit-identical to the torch reference. On the vLLM path each received "
            "bucket is quantized in place on verl's flat transfer buffer (plan cached by layout, output views "
            "reused, launch through the compiled kernel's runner); on an H200 the hook reached 87.5 % (Qwen3-8B) "
            "and 76.9 % (Qwen3-30B-A3B) of copy bandwidth end to end."
        ),
        "side": ("engine-process quantizer (vLLM path)", "trainer-process quantizer (SGLang path)"),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "env": env_defaults("fast_block_quant"),
        "env_notes": env_help("fast_block_quant"),
    },
    "direct_sync": {
        "description": (
            "Direct FP8 weight sync on the vLLM path: verl's worker extension hands each received bucket to a "
            "plan built once from the engine's own parameters and mapping tables; the covered tensors are "
            "quantized with one launch straight into the fused / stacked FP8 parameters and their block scales "
            "(no per-tensor load_weights), everything else goes through verl's receiver, counted in one log "
            "line per sync; verl's receiver builds tensor views only for what its loader still takes "
            "(lazy_receive.py). vLLM path only (the plan reads vLLM 0.24.0's loaders; with SGLang it installs "
            "nothing). Refused by rule BLK006 with ue8m0 scales and where the engine's profile does not record it "
            "byte-exact in the real engine (vLLM 0.24.0: shown at rollout tp 1, docs/results.md#weight-sync); picked by auto "
            "where it also trained inside an RL loop with that trainer and kind of model (vLLM 0.24.0: FSDP, "
            "dense or MoE)."
        ),
        "side": (
            "trainer-process bucket fill (vLLM path)",
            "engine-process receiver and quantizer (vLLM path)",
        ),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "env": env_defaults("direct_sync"),
        "env_notes": env_help("direct_sync"),
        "engine_args": {"vllm": {}, "sglang": {}},
    },
    "sync_timing": {
        "description": (
            "Measurement, never set by a compiled bundle: one log line per weight sync in the trainer splitting the "
            "sync's time into the trainer's stream and bucket fill, the device waits and the engine's replies. It "
            "wraps verl's bucket sender, replaces the device module verl's transfer module synchronizes through "
            "and adds a gc callback for the process; add it to FP8SPEC_RUNTIME_PATCHES to measure a sync."
        ),
        "side": ("trainer",),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "env": env_defaults("sync_timing"),
    },
    "mbridge_compat": {
        "description": (
            "mbridge (verl's vanilla_mbridge path) on a megatron-core without ModelType.encoder_and_decoder "
            "(the megatron-core profile's enum.model_type fact): mbridge's model builder compares with it; the "
            "patch gives mbridge a ModelType whose encoder_and_decoder matches no model, so a decoder-only GPT "
            "builds as before."
        ),
        "side": ("trainer",),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "trainer_backends": ("megatron",),
        "env": env_defaults("mbridge_compat"),
    },
    "replay_poll": {
        "description": (
            "verl's sync trainer looks for finished rollouts every 0.1 s instead of every 2 s: its replay buffer "
            "sleeps a 2.0 s poll interval between looks (the trainer never sets it), so each step's generation "
            "ended on the next multiple of 2 s after the engine had finished (all 15 generation times of the "
            "2026-12-04 H200 runs). Async trainer modes and a buffer given an interval are left alone."
        ),
        "side": ("trainer driver (TaskRunner)",),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "env": env_defaults("replay_poll"),
        "env_notes": env_help("replay_poll"),
    },
    "te_extra_state_compat": {
        "description": (
            "Checkpoints of Megatron MoE experts trained in FP8 with TransformerEngine's stateless recipes "
            "(blockwise, current scaling, MXFP8): TransformerEngine saves an empty extra state for them, which "
            "TEGroupedLinear cannot split in a megatron-core whose profile says so "
            "(checkpoint.grouped_splits_stateless_extra_state); the patch returns one empty state per GEMM, as "
            "later megatron-core releases do."
        ),
        "side": ("trainer",),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "trainer_backends": ("megatron",),
        "env": env_defaults("te_extra_state_compat"),
    },
    "module_precision": {
        "description": (
            "The spec's training.bf16_modules in the Megatron trainer: megatron-core's per-module quant_recipe "
            "(a RecipeConfig, which verl's override_transformer_config cannot carry) built when each "
            "TransformerConfig is, so that TransformerEngine runs the named module classes (attention, dense MLP, "
            "experts, shared experts) in BF16 inside the model's FP8 autocast."
        ),
        "side": ("trainer",),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "trainer_backends": ("megatron",),
        "env": env_defaults("module_precision"),
    },
    "te_report": {
        "description": (
            "End-to-end FP8 training made visible: after each old-log-prob and update call of the Megatron "
            "actor, one log line says how many TransformerEngine module calls ran FP8 in the forward and the "
            "backward, with which recipe and quantizers (read off the TE modules), and which modules the recipe "
            "keeps in BF16 (router, embedding, output layer, norms) with their weight dtype."
        ),
        "side": ("trainer",),
        "engines": {"vllm": KNOWN_VERSIONS["vllm"], "sglang": KNOWN_VERSIONS["sglang"]},
        "verl": KNOWN_VERSIONS["verl"],
        "trainer_backends": ("megatron",),
        "env": env_defaults("te_report"),
    },
}
