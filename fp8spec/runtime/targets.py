"""The modules the runtime's hooks wait for, by import name (plain data: no torch, no verl).

verl 0.9.1's modules are described in ``verl_patch``; the Megatron-side ones in ``trainer/``.
"""

MOD_ENGINE_WORKERS = "verl.workers.engine_workers"
MOD_VLLM_EXT = "verl.workers.rollout.vllm_rollout.utils"
MOD_VLLM_QUANT = "verl.utils.vllm.vllm_quant_utils"
MOD_FP8_UTILS = "verl.utils.fp8_utils"
MOD_BUCKET_TRANSFER = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
MOD_MBRIDGE_UTIL = "mbridge.core.util"
MOD_REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"
MOD_MEGATRON_TE = "megatron.core.extensions.transformer_engine"
MOD_MEGATRON_CONFIG = "megatron.core.transformer.transformer_config"
