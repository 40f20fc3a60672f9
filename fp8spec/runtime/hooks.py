"""Every hook of the runtime patch set, as one table (plain data: no torch, no verl).

A hook waits for its target module to be imported (``_importhook``), then checks the versions it needs
(``version_guard``) and runs its installer, imported only then. ``activate`` registers the hooks of the patches
named in ``FP8SPEC_RUNTIME_PATCHES``; hooks of one target module register, and so run, in their ``order``.

Order matters where two hooks touch the same verl method: each wraps the method it finds, so the one installed
later is the outer wrapper, and a hook that replaces a method (``lazy_receive``, ``fused_send``) must come before
any that wrap it. ``why_order`` says why a hook sits where it does; ``wraps`` names what it wraps or replaces.
The chain around each verl method follows from the table (``wrapping_chain``):

* ``BucketedWeightSender.async_send_weights`` (trainer): ``fused_send`` replaces verl's loop; ``sync_timing``
  (measurement, only when asked for) wraps it.
* ``BucketedWeightReceiver.receive_weights`` (engine): ``lazy_receive`` replaces verl's loop; ``flat_receive``
  wraps it to show each bucket's flat buffer to the quantizers.
* ``vLLMColocateWorkerExtension._update_weights`` / ``update_weights_from_ipc`` (engine): ``vllm_kv`` (KV scales
  out of the stream, written after the sync), then ``direct_sync_hook`` outside it.
* ``ActorRolloutRefWorker.init_model`` (trainer): ``kv_hooks``' calibration, then ``te_report``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8spec.runtime.targets import (
    MOD_BUCKET_TRANSFER,
    MOD_ENGINE_WORKERS,
    MOD_FP8_UTILS,
    MOD_MBRIDGE_UTIL,
    MOD_MEGATRON_CONFIG,
    MOD_MEGATRON_TE,
    MOD_REPLAY_BUFFER,
    MOD_VLLM_EXT,
    MOD_VLLM_QUANT,
)

PROCESSES = ("trainer", "engine", "both")

# Where verl (or the library) runs what a hook wraps: the process a hook acts in follows from it.
RUNS_IN = {
    "ActorRolloutRefWorker": "trainer",
    "BucketedWeightSender": "trainer",
    "bucketed_weight_transfer.get_torch_device": "trainer",  # timed only around the sender's sync
    "gather_copy.launch": "trainer",
    "FP8QuantizerHelper": "trainer",
    "ModelType": "trainer",
    "ReplayBuffer": "trainer",  # the TaskRunner, which drives the trainer
    "TEGroupedLinear": "trainer",
    "TransformerConfig": "trainer",
    "BucketedWeightReceiver": "engine",
    "vLLMColocateWorkerExtension": "engine",
    "vllm_quant_utils.quant_weights": "engine",
}


@dataclass(frozen=True)
class Hook:
    patches: tuple[str, ...]  # the patch names (FP8SPEC_RUNTIME_PATCHES) any of which turns it on
    target: str  # the module whose import runs the installer
    installer: str  # dotted path of ``installer(module)``, imported when the target is
    process: str  # trainer | engine | both: where its installer's work takes effect
    order: int  # position among the hooks of ``target`` (1 first)
    wraps: tuple[str, ...]  # what it wraps or replaces, by owner (RUNS_IN) and attribute
    why_order: str = ""
    requires: tuple[str, ...] = ()  # distributions whose version ``version_guard.require`` checks first

    @property
    def label(self) -> str:
        return "/".join(self.patches)


HOOKS: tuple[Hook, ...] = (
    Hook(
        ("kv_scales",),
        MOD_ENGINE_WORKERS,
        "fp8spec.runtime.verl_patch.patch_engine_workers",
        "trainer",
        1,
        ("ActorRolloutRefWorker.init_model",),
    ),
    Hook(
        ("te_report",),
        MOD_ENGINE_WORKERS,
        "fp8spec.runtime.verl_patch.patch_engine_workers_te_report",
        "trainer",
        2,
        ("ActorRolloutRefWorker.init_model",),
        "independent of the calibration; attached after it",
    ),
    Hook(
        ("kv_scales",),
        MOD_VLLM_EXT,
        "fp8spec.runtime.kv_scales.vllm_kv.patch_verl_worker_extension",
        "engine",
        1,
        (
            "vLLMColocateWorkerExtension._update_weights",
            "vLLMColocateWorkerExtension.update_weights_from_ipc",
        ),
        "inside direct_sync's wrapper: it takes the scales out of what direct_sync leaves to verl",
        ("vllm",),
    ),
    Hook(
        ("direct_sync",),
        MOD_VLLM_EXT,
        "fp8spec.runtime.weight_sync.receiver.direct_sync_hook.patch_worker_extension",
        "engine",
        2,
        (
            "vLLMColocateWorkerExtension._update_weights",
            "vLLMColocateWorkerExtension.update_weights_from_ipc",
        ),
        "outermost: routes each bucket before verl's loaders (and kv_scales') see it",
        ("vllm",),
    ),
    Hook(
        ("direct_sync",),
        MOD_BUCKET_TRANSFER,
        "fp8spec.runtime.weight_sync.receiver.lazy_receive.patch_bucket_receiver_lazy",
        "engine",
        1,
        ("BucketedWeightReceiver.receive_weights",),
        "replaces verl's receive loop: first, so the wrappers below wrap it",
    ),
    Hook(
        ("direct_sync",),
        MOD_BUCKET_TRANSFER,
        "fp8spec.runtime.weight_sync.receiver.flat_receive.patch_bucket_receiver_quiet",
        "engine",
        2,
        (
            "BucketedWeightReceiver._init_socket",
            "BucketedWeightReceiver.receive_weights",
            "BucketedWeightReceiver._cleanup",
        ),
        "wraps the receive loop lazy_receive installed",
    ),
    Hook(
        ("direct_sync",),
        MOD_BUCKET_TRANSFER,
        "fp8spec.runtime.weight_sync.sender.fused_send.install",
        "trainer",
        3,
        ("BucketedWeightSender.async_send_weights",),
        "replaces verl's send loop: before sync_timing, which wraps it",
        ("verl",),
    ),
    Hook(
        ("sync_timing",),
        MOD_BUCKET_TRANSFER,
        "fp8spec.runtime.weight_sync.sender.sync_timing.patch_bucket_sender",
        "trainer",
        4,
        (
            "BucketedWeightSender.async_send_weights",
            "BucketedWeightSender._init_socket",
            "BucketedWeightSender._init_buffer",
            "bucketed_weight_transfer.get_torch_device",
            "gather_copy.launch",
        ),
        "last: times whatever send loop the hooks before it left",
    ),
    Hook(
        # fires flat_receive on the bucket module in turn (fast_block_quant's flat path)
        ("fast_block_quant", "ue8m0_scales"),
        MOD_VLLM_QUANT,
        "fp8spec.runtime.quantization.verl_quant.install_vllm_quant",
        "engine",
        1,
        ("vllm_quant_utils.quant_weights",),
        requires=("vllm",),
    ),
    Hook(
        ("fast_block_quant", "ue8m0_scales"),
        MOD_FP8_UTILS,
        "fp8spec.runtime.quantization.verl_quant.install_fp8_utils",
        "trainer",
        1,
        ("FP8QuantizerHelper.quant_weights_by_name",),
    ),
    Hook(
        ("mbridge_compat",),
        MOD_MBRIDGE_UTIL,
        "fp8spec.runtime.trainer.mbridge_compat.patch_mbridge_util",
        "trainer",
        1,
        ("ModelType.encoder_and_decoder",),
    ),
    Hook(
        ("replay_poll",),
        MOD_REPLAY_BUFFER,
        "fp8spec.runtime.trainer.replay_poll.patch_replay_buffer",
        "trainer",
        1,
        ("ReplayBuffer.__init__",),
    ),
    Hook(
        ("te_extra_state_compat",),
        MOD_MEGATRON_TE,
        "fp8spec.runtime.trainer.te_extra_state_compat.patch_megatron_te",
        "trainer",
        1,
        ("TEGroupedLinear._split_extra_state",),
    ),
    Hook(
        ("module_precision",),
        MOD_MEGATRON_CONFIG,
        "fp8spec.runtime.trainer.module_precision.patch_transformer_config",
        "trainer",
        1,
        ("TransformerConfig.__post_init__",),
    ),
)


def for_patches(patches: set[str] | frozenset[str]) -> list[Hook]:
    """The hooks of ``patches``, each once, in registration order (per target module: ``order``)."""
    return sorted((h for h in HOOKS if set(h.patches) & set(patches)), key=lambda h: (h.target, h.order))


def wrapping_chain(method: str) -> list[str]:
    """The installers around ``method`` (``Owner.attribute``), innermost first."""
    return [h.installer for h in sorted(HOOKS, key=lambda h: (h.target, h.order)) if method in h.wraps]
