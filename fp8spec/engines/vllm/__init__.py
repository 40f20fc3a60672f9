"""vLLM: the engine verl pins by default (backends/vllm/<version>.yaml)."""

from __future__ import annotations

from fp8spec.engines.base import Engine


class VLLM(Engine):
    name = "vllm"
    label = "vLLM"
    stack_description = "vLLM release (used with rollout.engine vllm). Default: the one verl pins."
    # validate_fp8_block_shape (vllm/.../quantization/utils/fp8_utils.py) checks TP-split shards and merged
    # layers, and lets the last partition of a merged layer that is not TP-split be ragged
    ragged_last_partition = True
    deep_gemm_switch = True  # VLLM_USE_DEEP_GEMM (vllm/envs.py)
    direct_sync_plan = True  # direct_sync_plan.py follows vLLM 0.24.0's mappings and loaders
    memory_rows = (
        ("requested (total x utilization)", "requested"),
        ("activation peak (estimate)", "activation_peak"),
        ("non-torch memory (estimate)", "non_torch"),
        ("CUDA graph estimate", "cudagraph"),
    )
    runner_labels = {"v1": "vLLM V1 model runner", "v2": "vLLM V2 model runner"}
    # what `plan` says under the rollout table for a runner (why a row reads as it does)
    runner_notes = {
        "v2": "CUDA graph estimate 0.00 GiB: this vLLM release runs this architecture on its V2 model runner, "
        "whose profile_cudagraph_memory returns 0, so nothing is deducted for CUDA graphs before the KV cache is "
        "sized (the vLLM profile's memory.v2_runner_architectures); after capture the graphs take 0.8-1.0 GiB on "
        "top of gpu_memory_utilization (measured:rollout.vllm.cuda_graph_memory_gib), inside the 2 GiB "
        "every proposed memory fix leaves"
    }

    beyond_share_estimate = ("vllm", "process_beyond_share_bytes")  # measured beside the trainer

    @property
    def start_refusal(self) -> str:
        # the optimizer state appears at the first update, so a start that fitted can fail at step 2's wake-up
        return (
            "vLLM refuses to start ('Free memory on device ... is less than desired GPU memory utilization'), or "
            "cannot wake up at step 2 once the first update has allocated the optimizer state ('CUDA Error: out "
            "of memory at .../cumem_allocator.cpp')"
        )


ENGINE = VLLM()
