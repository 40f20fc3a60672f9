"""Worker extension for the real-engine KV-scale probe (``worker_extension_cls="benchmarks.engine.kv_probe_ext.ProbeExt"``).

The scale writes under test are fp8spec's own (``fp8spec.runtime.kv_scales.vllm_kv``); this class only adds
what an experiment needs: read the scales the kernels use, write them without the wake-up keeper
(``probe_raw_set``, the control), and keep / restore the weights around a level-2 sleep the way verl's weight
update does (same values, so only the KV scales differ between runs).
"""

from __future__ import annotations

import torch

from fp8spec.runtime.kv_scales.vllm_kv import Fp8specKVScaleWorkerExtension, apply_kv_scales


def _attention_layers(model):
    for name, mod in model.named_modules():
        if hasattr(mod, "_k_scale") and hasattr(mod, "_v_scale") and hasattr(mod, "_q_scale"):
            yield name, mod


class ProbeExt(Fp8specKVScaleWorkerExtension):
    def probe_runner(self) -> str:
        return type(self.model_runner).__module__ + "." + type(self.model_runner).__name__

    def probe_read_scales(self) -> dict:
        """{layer: [q, k, v, k_float, v_float]}: device buffers (what FA3 reads) and host floats."""
        out = {}
        for name, mod in _attention_layers(self.model_runner.model):
            out[name] = [float(mod._q_scale.item()), float(mod._k_scale.item()), float(mod._v_scale.item()),
                         float(mod._k_scale_float), float(mod._v_scale_float)]
        return out

    def probe_layer_names(self) -> list:
        return [name for name, _ in _attention_layers(self.model_runner.model)]

    def probe_raw_set(self, named_scales) -> int:
        return apply_kv_scales(self.model_runner.model, named_scales)

    def probe_snapshot_weights(self) -> int:
        self._probe_weights = {n: p.detach().to("cpu", copy=True)
                               for n, p in self.model_runner.model.named_parameters()}
        return len(self._probe_weights)

    @torch.inference_mode()
    def probe_restore_weights(self) -> int:
        for n, p in self.model_runner.model.named_parameters():
            p.data.copy_(self._probe_weights[n].to(p.device))
        torch.cuda.synchronize()
        return len(self._probe_weights)
