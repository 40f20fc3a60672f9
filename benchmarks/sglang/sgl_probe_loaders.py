"""Read-only probes that run inside SGLang's TP worker, as custom weight loaders.

SGLang 0.5.12 imports a loader named in ``ServerArgs.custom_weight_loader`` inside every TP worker and calls
``loader(model, named_tensors)`` when ``update_weights_from_tensor`` names it as ``load_format``
(srt/model_executor/model_runner.py:2092-2094; srt/entrypoints/engine.py:1035-1057). That is the only way in
to the model from the offline ``sglang.Engine`` (its ``collective_rpc`` returns nothing, engine.py:1204-1209),
so these loaders write what they read to ``$FP8SPEC_PROBE_OUT/<tag>.json``; the tag travels as the name of
the one tensor sent (``probe.<tag>``). They change nothing in the model.

* ``read_kv_scales``: every RadixAttention layer's device ``k_scale``/``v_scale`` (what the cache write and FA3
  read) and host ``k_scale_float``/``v_scale_float`` (what FlashInfer and triton decode read),
  srt/layers/radix_attention.py:89-92, srt/layers/quantization/kv_cache.py:82-85.
* ``fingerprints``: a byte-exact fingerprint of every parameter (the vLLM weight-sync probe's, ws_probe_ext.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from benchmarks.common.fingerprint import fingerprint


def _out(named_tensors, kind: str) -> Path:
    names = [n for n, _ in named_tensors]
    tag = names[0].split(".", 1)[1] if names and names[0].startswith("probe.") else kind
    folder = Path(os.environ.get("FP8SPEC_PROBE_OUT", "/tmp/fp8spec-probe"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{tag}.json"


def read_kv_scales(model: torch.nn.Module, named_tensors) -> None:
    out = {}
    for name, mod in model.named_modules():
        if hasattr(mod, "k_scale_float") and hasattr(mod, "k_scale"):
            k, v = mod.k_scale, mod.v_scale
            out[name] = {
                "k_scale": None if k is None else float(k.detach().float().cpu().item()),
                "v_scale": None if v is None else float(v.detach().float().cpu().item()),
                "k_scale_float": mod.k_scale_float,
                "v_scale_float": mod.v_scale_float,
            }
    _out(named_tensors, "kv_scales").write_text(json.dumps(out, indent=1), encoding="utf-8")


def fingerprints(model: torch.nn.Module, named_tensors) -> None:
    out = {n: fingerprint(p) for n, p in model.named_parameters()}
    _out(named_tensors, "fingerprints").write_text(json.dumps(out, indent=1), encoding="utf-8")


LOADERS = [f"{__name__}.read_kv_scales", f"{__name__}.fingerprints"]


def probe(llm, loader: str, tag: str) -> dict:
    """Run ``loader`` in the engine's TP worker and return what it wrote (driver side)."""
    path = Path(os.environ.get("FP8SPEC_PROBE_OUT", "/tmp/fp8spec-probe")) / f"{tag}.json"
    path.unlink(missing_ok=True)
    # a CUDA tensor: SGLang's tensor serializer (utils/patch_torch.py) rewrites the device index of CUDA tensors
    # and fails on a CPU one (IndexError, seen on the H200)
    probe_tensor = torch.zeros(1, device="cuda")
    llm.update_weights_from_tensor([(f"probe.{tag}", probe_tensor)], load_format=f"{__name__}.{loader}",
                                   flush_cache=False)
    return json.loads(path.read_text(encoding="utf-8"))
