"""FP8 weight sync through verl 0.9.1's SGLang path into a real SGLang 0.5.12 engine: verl's quantizer (and
fp8spec's ``fast_block_quant`` replacement of it), checked byte for byte against a fresh engine, and timed.

    python -m benchmarks.sglang.weight_sync_probe_sglang --out DIR [--cases tiny-dense,tiny-moe,qwen3-8b] \
        [--paths verl,patch,fresh,fresh-ref]
    WS_DTYPE=fp32 python -m benchmarks.sglang.weight_sync_probe_sglang ...   # an FSDP trainer's float32 weights

The SGLang counterpart of ``benchmarks/engine/weight_sync_probe.py``. One process per engine:

* ``verl``: the trainer side of verl's ``ServerAdapter.update_weights`` FP8 branch
  (verl/workers/rollout/sglang_rollout/sglang_rollout.py:357-390), with verl's own functions:
  ``SGLangFP8QuantizerHelper(build_sglang_fp8_quant_config(hf_config)).quant_weights_by_name`` (the quantizer,
  verl/utils/fp8_utils.py:86-132 -> ``scaled_fp8_blockwise``), ``get_named_tensor_buckets`` (2048 MiB buckets,
  rollout.yaml:296), SGLang's ``sglang.srt.weight_sync.utils.update_weights`` (CUDA IPC handles gathered over the
  infer_tp mesh, an ``UpdateWeightsFromTensorReqInput``), then ``flush_cache``. The device mesh is the one verl
  builds when it has none (cpu, (dp, infer_tp, infer_pp), sglang_rollout.py:216-224) over a one-process gloo
  group. The request goes to the engine's ``tokenizer_manager.update_weights_from_tensor(obj, None)`` -- what
  SGLang's HTTP handler calls (entrypoints/http_server.py:1167-1186) after verl's AsyncHttpServerAdapter posts it
  (http_server_engine.py:758-788, base64 of the same bytes); the offline Engine has no HTTP server. Three syncs.
* ``patch``: the same with ``FP8SPEC_RUNTIME_PATCHES=fast_block_quant`` (fp8spec's replacement of
  ``FP8QuantizerHelper.quant_weights_by_name``, fp8spec/runtime/quantization/verl_quant.py ``patch_fp8_utils``).
* ``fresh`` / ``fresh-ref`` (tiny cases): a new engine loading the same weights from an FP8 checkpoint quantized by
  verl's ``scaled_fp8_blockwise`` / by fp8spec's reference quantizer, i.e. without any sync.

Engines are built as verl builds them (sglang_common.engine_kwargs: dummy load, FP8 through
json_model_override_args, memory saver + CPU backup), without CUDA graphs (the vLLM probe's enforce_eager), with
``sgl_probe_loaders`` as custom weight loaders to read every parameter's fingerprint inside the TP worker.
Verdicts (DIR/ws_sglang_verdicts.json): verl == fresh, patch == fresh-ref, verl vs patch, greedy log-probs, and
the sync seconds per step (median of 3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common.cli import child_env, default_out, run_logged
from benchmarks.engine.weight_sync_probe import case_config, make_weights, write_fp8_checkpoint
from benchmarks.sglang.sglang_common import engine_kwargs, sglang_env, verl_sglang_fp8_config

MODULE = "benchmarks.sglang.weight_sync_probe_sglang"


class _EngineEndpoint:
    """What verl's AsyncHttpServerAdapter reaches over HTTP: the server's handler body (http_server.py:1179)."""

    def __init__(self, llm):
        self.llm = llm

    async def update_weights_from_tensor(self, req):
        return await self.llm.tokenizer_manager.update_weights_from_tensor(req, None)


def _device_mesh():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29617", rank=0, world_size=1)
    return init_device_mesh("cpu", mesh_shape=(1, 1, 1), mesh_dim_names=["dp", "infer_tp", "infer_pp"])


async def _verl_sync(llm, mesh, weights, hf_config) -> None:
    """verl's ServerAdapter.update_weights, FP8 branch (sglang_rollout.py:357-390), minus LoRA and delta paths."""
    import torch
    from sglang.srt.weight_sync.utils import update_weights as sgl_update_weights
    from verl.utils.sglang.sglang_fp8_utils import SGLangFP8QuantizerHelper, build_sglang_fp8_quant_config
    from verl.workers.rollout.sglang_rollout.utils import get_named_tensor_buckets

    helper = SGLangFP8QuantizerHelper(build_sglang_fp8_quant_config(hf_config))
    quantized = helper.quant_weights_by_name(iter(weights), dtype=torch.bfloat16)
    endpoint = _EngineEndpoint(llm)
    async for params_batch in get_named_tensor_buckets(quantized, 2048 << 20):
        await sgl_update_weights(engine=endpoint, params_batch=list(params_batch), device_mesh_key="infer_tp",
                                 device_mesh=mesh)
    await llm.tokenizer_manager.flush_cache()


def run_engine(case: str, path: str, out: Path, util: float) -> None:
    if path == "patch":
        import fp8spec.runtime  # noqa: F401 - activates FP8SPEC_RUNTIME_PATCHES before verl's modules load
    import sglang
    import torch

    from benchmarks.sglang.sgl_probe_loaders import LOADERS, probe

    os.environ["FP8SPEC_PROBE_OUT"] = str(out / f"probe-{case}-{path}")
    cfg = case_config(case)
    folder = Path("/tmp/fp8spec-models") / f"ws-sglang-{case}"
    extra = {"disable_cuda_graph": True, "custom_weight_loader": list(LOADERS), "disable_radix_cache": True}
    if path.startswith("fresh"):
        model = folder / ("fp8" if path == "fresh" else "fp8ref")
        kw = engine_kwargs(str(model), "bf16", util, 1024, **extra)
        kw.update(load_format="auto", quantization="fp8",
                  json_model_override_args=json.dumps({"quantization_config": verl_sglang_fp8_config()}))
    else:
        (folder / "dummy").mkdir(parents=True, exist_ok=True)
        (folder / "dummy" / "config.json").write_text(json.dumps(cfg, indent=1), encoding="utf-8")
        kw = engine_kwargs(str(folder / "dummy"), "fp8", util, 1024, **extra)
    llm = sglang.Engine(**kw)
    record = {"case": case, "path": path, "dtype": os.environ.get("WS_DTYPE", "bf16"), "sglang": sglang.__version__}
    if not path.startswith("fresh"):
        import verl.utils.fp8_utils as fp8_utils

        record["quantizer"] = ("fp8spec" if getattr(fp8_utils.FP8QuantizerHelper.quant_weights_by_name, "_fp8spec",
                                                    None) is not None else "verl")
        mesh = _device_mesh()
        times = []
        for _ in range(3):
            weights = make_weights(cfg, step=0)  # the same values each step: the last sync is checked
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            llm.loop.run_until_complete(_verl_sync(llm, mesh, weights, {"quantization_config": None}))
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            del weights
            torch.cuda.empty_cache()
        record["sync_s"] = times
    record["fingerprints"] = probe(llm, "fingerprints", f"fp-{case}-{path}")
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, cfg["vocab_size"], (32,), generator=gen).tolist() for _ in range(4)]
    outs = llm.generate(input_ids=prompts, sampling_params={"temperature": 0.0, "max_new_tokens": 8,
                                                            "ignore_eos": True}, return_logprob=True)
    record["greedy"] = [{"tokens": list(o["output_ids"]),
                         "logprobs": [lp[0] for lp in o["meta_info"]["output_token_logprobs"]]} for o in outs]
    (out / f"ws_sglang_{case}_{path}.json").write_text(json.dumps(record), encoding="utf-8")
    llm.shutdown()


def prepare_fresh(case: str, out: Path) -> None:
    """FP8 checkpoints of the step-0 weights: verl's quantizer (fp8/) and fp8spec's reference (fp8ref/)."""
    import torch

    cfg = case_config(case)
    weights = make_weights(cfg, step=0)
    root = Path("/tmp/fp8spec-models") / f"ws-sglang-{case}"
    stats = write_fp8_checkpoint(cfg, weights, root / "fp8", "verl")
    write_fp8_checkpoint(cfg, weights, root / "fp8ref", "reference")
    for sub in ("fp8", "fp8ref"):  # SGLang reads verl's SGLang config (no vLLM router list) from config.json
        conf = json.loads((root / sub / "config.json").read_text())
        conf["quantization_config"] = verl_sglang_fp8_config()
        (root / sub / "config.json").write_text(json.dumps(conf, indent=1), encoding="utf-8")
    (out / f"ws_sglang_{case}_quantizers.json").write_text(json.dumps(stats), encoding="utf-8")
    del weights
    torch.cuda.empty_cache()


def _differ(a: dict, b: dict) -> list[str]:
    return sorted(n for n in a if a[n] != b.get(n))[:20]


def verdict(out: Path, case: str) -> dict:
    recs = {p: json.loads((out / f"ws_sglang_{case}_{p}.json").read_text())
            for p in ("verl", "patch", "fresh", "fresh-ref") if (out / f"ws_sglang_{case}_{p}.json").exists()}
    v: dict = {"paths": sorted(recs)}
    q = out / f"ws_sglang_{case}_quantizers.json"
    if q.exists():
        v["verl_kernel_vs_reference"] = json.loads(q.read_text())
    for synced, fresh in (("verl", "fresh"), ("patch", "fresh-ref"), ("verl", "patch")):
        if synced in recs and fresh in recs:
            a, b = recs[synced]["fingerprints"], recs[fresh]["fingerprints"]
            v[f"{synced}_vs_{fresh}_params_differ"] = _differ(a, b)
            v[f"{synced}_vs_{fresh}_param_count"] = [len(a), len(b)]
            v[f"greedy_{synced}_eq_{fresh}"] = recs[synced]["greedy"] == recs[fresh]["greedy"]
    for p in ("verl", "patch"):
        if p in recs:
            v[f"{p}_quantizer"] = recs[p].get("quantizer")
            v[f"{p}_sync_s_median"] = statistics.median(recs[p]["sync_s"])
            v[f"{p}_sync_s_all"] = recs[p]["sync_s"]
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out("weight_sync_probe_sglang"), help="default: %(default)s")
    ap.add_argument("--cases", default="tiny-dense,tiny-moe,qwen3-8b")
    ap.add_argument("--paths", default="verl,patch,fresh,fresh-ref")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "PATH"))
    ap.add_argument("--prepare-fresh", metavar="CASE")
    ap.add_argument("--util", type=float, default=0.3)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        run_engine(a.one[0], a.one[1], a.out, a.util)
        return 0
    if a.prepare_fresh:
        prepare_fresh(a.prepare_fresh, a.out)
        return 0
    base = sglang_env(deep_gemm=False)
    base = child_env(base)
    base.pop("FP8SPEC_RUNTIME_PATCHES", None)
    verdicts, rc = {}, 0
    for case in a.cases.split(","):
        tiny = case.startswith("tiny-")
        paths = [p for p in a.paths.split(",") if tiny or not p.startswith("fresh")]
        if tiny and any(p.startswith("fresh") for p in paths):
            subprocess.run([sys.executable, "-m", MODULE, "--out", str(a.out), "--prepare-fresh", case], env=base,
                           check=True)
        for path in paths:
            env = dict(base)
            if path == "patch":
                env["FP8SPEC_RUNTIME_PATCHES"] = "fast_block_quant"
            util = "0.3" if tiny or case == "qwen3-8b" else "0.35"
            if run_logged([sys.executable, "-m", MODULE, "--out", str(a.out), "--util", util, "--one", case, path],
                          env, a.out / f"ws_sglang_{case}_{path}.log", 420, f"weight_sync_sglang {case} {path}") != 0:
                rc = 1
        try:
            verdicts[case] = verdict(a.out, case)
        except Exception as exc:  # a missing record is reported, the other cases still run
            verdicts[case] = {"error": repr(exc)}
        print(case, json.dumps(verdicts[case]), flush=True)
    (a.out / "ws_sglang_verdicts.json").write_text(json.dumps(verdicts, indent=1), encoding="utf-8")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
