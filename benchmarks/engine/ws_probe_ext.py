"""Worker extension for the weight-sync probe: verl 0.9.1's own ``vLLMColocateWorkerExtension`` (so the
weight update runs verl's receiver, verl's quantizer or fp8spec's ``fast_block_quant`` replacement, and vLLM's
real ``load_weights``), plus read-only probes: a fingerprint of every parameter the engine holds.

Importing ``fp8spec.runtime`` here activates the patches named in ``FP8SPEC_RUNTIME_PATCHES`` in the worker
process before verl's modules load, as the vLLM plugin entry point does in a deployed bundle.
"""

from __future__ import annotations

import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

import fp8spec.runtime  # noqa: F401 - activates FP8SPEC_RUNTIME_PATCHES in this process
from benchmarks.common.fingerprint import fingerprint

_WEIGHTS: dict[str, torch.Tensor] = {}
_TIMERS: list = []  # the engine process's ws_breakdown.Timers, once installed


class ProbeVerlExt(vLLMColocateWorkerExtension):
    def probe_fingerprints(self) -> dict:
        return {n: fingerprint(p) for n, p in self.model_runner.model.named_parameters()}

    def probe_breakdown_install(self) -> dict:
        """Install the stage timers (ws_breakdown.install_worker) in this engine process; returns what was wrapped."""
        from benchmarks.engine.ws_breakdown import Timers, install_worker

        if not _TIMERS:
            _TIMERS.append(Timers(sync=torch.cuda.synchronize))
        return install_worker(_TIMERS[0], self.model_runner.model)

    def probe_breakdown_take(self) -> dict:
        """The stages recorded since the last take, and reset."""
        rec = _TIMERS[0].record() if _TIMERS else {"stages": {}}
        if _TIMERS:
            _TIMERS[0].reset()
        return rec

    def probe_patched(self) -> dict:
        import verl.utils.vllm.vllm_quant_utils as q
        import verl.workers.rollout.vllm_rollout.bucketed_weight_transfer as b

        from fp8spec.runtime.quantization.flat_bucket import ENGINE

        return {"quant_weights_replaced": getattr(q.quant_weights, "_fp8spec", None) is not None,
                "receiver_patched": bool(getattr(b.BucketedWeightReceiver, "_fp8spec_flat_patched", False)),
                "flat_stats": dict(ENGINE.stats),
                "direct_stats": dict(getattr(self, "_fp8spec_direct_stats", {}) or {}),
                "active": sorted(fp8spec.runtime.active_patches())}
