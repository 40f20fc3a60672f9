"""Do k/v scales pushed after CUDA-graph capture take effect in the real SGLang 0.5.12 engine, per attention backend?

    python -m benchmarks.sglang.kv_scales_probe_sglang --out DIR [--backends flashinfer,triton,fa3]

The SGLang counterpart of ``benchmarks/engine/kv_scales_probe.py``. A tiny Qwen3 (4 layers,
hidden 1024, 8/4 heads of 128, lm_head x8 for clear greedy margins) saved as an FP8 block checkpoint quantized by
verl's own ``scaled_fp8_blockwise`` (so RadixAttention gets Fp8KVCacheMethod's k_scale/v_scale, as with verl's
FP8 rollout), FP8 (e4m3) KV cache, CUDA graphs as SGLang defaults (decode graphs up to ``cuda_graph_max_bs`` 8,
captured at start, before any push; piecewise prefill graphs on), memory saver and CPU weight backup on as verl
sets them, radix cache off (a repeated prompt must not reuse KV written under other scales). One process per
backend; scales are pushed with fp8spec's own SGLang loader ``fp8spec.runtime.kv_scales.sglang_kv.load_kv_scales``
(the bundle's custom_weight_loader), read back by ``sgl_probe_loaders.read_kv_scales``.

Each generation: 4 prompts of 48 random tokens, greedy, 12 new tokens, sampled tokens' log-probs, twice: alone
(batch 4: decode replays the captured graphs) and with 12 filler prompts (batch 16 > cuda_graph_max_bs: decode
runs eagerly, cuda_graph_runner.can_run), the in-engine eager reference. Phases: unit (scales 1.0 from the load)
-> push clip -> cal -> clip again -> verl's update cycle (release kv_cache+weights, resume weights, push clip,
resume kv_cache; verl/workers/rollout/sglang_rollout/sglang_rollout.py:276-303 and 305-390) -> unit again.

Verdicts (DIR/kv_probe_sglang_verdicts.json), per backend: the pushed values read back (device and host); scales
change the graph outputs; graph vs eager at unit (noise) and at clip (if decode under graphs kept the old scale,
the cache is written with the new one and read with the old: graph and eager part after the first token, which
prefill produced); clip -> cal -> clip restores the clip outputs bit for bit; the clip outputs survive verl's cycle.

SGLang API (0.5.12 wheel): Engine(**ServerArgs) (entrypoints/engine.py:199), generate(input_ids, sampling_params,
return_logprob) (:314; meta_info["output_token_logprobs"]: (logprob, token_id, text) per token),
update_weights_from_tensor(named_tensors, load_format, flush_cache) (:1035-1057), flush_cache (:905),
release_memory_occupation / resume_memory_occupation(tags) (:1173-1185), shutdown (:887).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmarks.common.cli import child_env, default_out, run_logged
from benchmarks.sglang.sglang_common import sglang_env, verl_sglang_fp8_config

MODULE = "benchmarks.sglang.kv_scales_probe_sglang"

KV_LOADER = "fp8spec.runtime.kv_scales.sglang_kv.load_kv_scales"
SCALES = {"unit": (1.0, 1.0), "clip": (0.004, 0.002), "cal": (0.02, 0.01)}
LAYERS = 4
BACKENDS = ("flashinfer", "triton", "fa3")


def write_checkpoint(folder: Path) -> Path:
    """The tiny dense Qwen3 of the weight-sync probe as an FP8 block checkpoint (verl's quantizer)."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from safetensors.torch import save_file
    from verl.utils.kernel.fp8_kernel import scaled_fp8_blockwise
    from weight_sync_probe import TINY, make_weights

    cfg = dict(TINY["tiny-dense"])
    tensors = {}
    for name, t in make_weights(cfg, step=0):
        t = t.to(torch.bfloat16)
        if name.endswith("_proj.weight"):
            q, s = scaled_fp8_blockwise(t, weight_block_size=[128, 128])
            tensors[name], tensors[name + "_scale_inv"] = q.contiguous().cpu(), s.squeeze(-1).contiguous().cpu()
        else:
            tensors[name] = t.contiguous().cpu()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    conf = dict(cfg, quantization_config=verl_sglang_fp8_config())
    (folder / "config.json").write_text(json.dumps(conf, indent=1), encoding="utf-8")
    return folder


def scale_tensors(which: str):
    import torch

    k, v = SCALES[which]
    return [(f"model.layers.{i}.self_attn.attn.{kind}_scale", torch.tensor(val, dtype=torch.float32))
            for i in range(LAYERS) for kind, val in (("k", k), ("v", v))]


def run_backend(backend: str, ckpt: str, out: Path) -> None:
    import sglang
    import torch

    from benchmarks.sglang.sgl_probe_loaders import LOADERS, probe

    os.environ["FP8SPEC_PROBE_OUT"] = str(out / f"probe-{backend}")
    llm = sglang.Engine(model_path=ckpt, dtype="bfloat16", quantization="fp8",
                        json_model_override_args=json.dumps({"quantization_config": verl_sglang_fp8_config()}),
                        kv_cache_dtype="fp8_e4m3", attention_backend=backend, mem_fraction_static=0.25,
                        context_length=1024, cuda_graph_max_bs=8, enable_memory_saver=True,
                        enable_weights_cpu_backup=True, disable_radix_cache=True, skip_tokenizer_init=True,
                        skip_server_warmup=True, random_seed=0, log_level="info",
                        custom_weight_loader=[KV_LOADER, *LOADERS])
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 8192, (48,), generator=gen).tolist() for _ in range(4)]
    fillers = [torch.randint(0, 8192, (48,), generator=gen).tolist() for _ in range(12)]
    params = {"temperature": 0.0, "max_new_tokens": 12, "ignore_eos": True}

    def generate(eager: bool):
        outs = llm.generate(input_ids=prompts + (fillers if eager else []), sampling_params=params,
                            return_logprob=True)
        return [{"tokens": list(o["output_ids"]),
                 "logprobs": [lp[0] for lp in o["meta_info"]["output_token_logprobs"]]} for o in outs[:4]]

    def push(which: str) -> None:
        llm.update_weights_from_tensor(scale_tensors(which), load_format=KV_LOADER, flush_cache=True)

    record = {"backend": backend, "sglang": sglang.__version__,
              "server": {k: v for k, v in llm.get_server_info().items()
                         if k in ("attention_backend", "sampling_backend", "cuda_graph_max_bs", "kv_cache_dtype",
                                  "disable_piecewise_cuda_graph", "disable_cuda_graph", "max_total_num_tokens")},
              "scales_at_start": probe(llm, "read_kv_scales", "start")}
    runs, reads = {}, {}
    runs["unit"], runs["unit_eager"] = generate(False), generate(True)
    for which in ("clip", "cal", "clip_again"):
        push(which.replace("_again", ""))
        reads[which] = probe(llm, "read_kv_scales", which)
        runs[which] = generate(False)
        if which == "clip":
            runs["clip_eager"] = generate(True)
    # verl 0.9.1's step: sleep -> weights back -> weight update + fp8spec's scale push -> KV cache back
    llm.release_memory_occupation(tags=["kv_cache", "weights"])
    llm.resume_memory_occupation(tags=["weights"])
    push("clip")
    llm.resume_memory_occupation(tags=["kv_cache"])
    llm.flush_cache()
    reads["clip_after_cycle"] = probe(llm, "read_kv_scales", "clip_after_cycle")
    runs["clip_after_cycle"] = generate(False)
    push("unit")
    runs["unit_again"] = generate(False)
    record.update(runs=runs, reads=reads)
    (out / f"kv_probe_sglang_{backend}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    llm.shutdown()


def _lp_diff(a, b) -> dict:
    """Largest |log-prob difference| over positions where both runs chose the same tokens so far, and where the
    first token differs (None: never)."""
    worst, n, first_split = 0.0, 0, None
    for ra, rb in zip(a, b):
        for pos, (ta, tb, la, lb) in enumerate(zip(ra["tokens"], rb["tokens"], ra["logprobs"], rb["logprobs"])):
            if ta != tb:
                first_split = pos if first_split is None else min(first_split, pos)
                break
            worst, n = max(worst, abs(la - lb)), n + 1
    return {"max_dlogprob": worst, "positions": n, "first_token_that_differs": first_split}


def _layer0(reads: dict) -> dict:
    return reads[sorted(reads)[0]] if reads else {}


def verdicts(out: Path, backends: list[str]) -> dict:
    v = {}
    for b in backends:
        path = out / f"kv_probe_sglang_{b}.json"
        if not path.exists():
            v[b] = {"error": "no record (see the log)"}
            continue
        r = json.loads(path.read_text())
        runs = r["runs"]
        v[b] = {
            "server": r["server"],
            "scales_at_start_layer0": _layer0(r["scales_at_start"]),
            "clip_read_back_layer0": _layer0(r["reads"]["clip"]),
            "clip_after_cycle_read_back_layer0": _layer0(r["reads"]["clip_after_cycle"]),
            "scales_change_graph_outputs": runs["unit"] != runs["clip"],
            "graph_vs_eager_at_unit": _lp_diff(runs["unit"], runs["unit_eager"]),
            "graph_vs_eager_at_clip": _lp_diff(runs["clip"], runs["clip_eager"]),
            "unit_vs_clip_graph": _lp_diff(runs["unit"], runs["clip"]),
            "cal_differs_from_clip": runs["cal"] != runs["clip"],
            "switch_back_bit_identical": runs["clip"] == runs["clip_again"],
            "clip_survives_verl_cycle": runs["clip"] == runs["clip_after_cycle"],
            "unit_again_bit_identical": runs["unit"] == runs["unit_again"],
        }
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out("kv_scales_probe_sglang"), help="default: %(default)s")
    ap.add_argument("--backends", default="flashinfer,triton")
    ap.add_argument("--one", nargs=2, metavar=("BACKEND", "CKPT"))
    ap.add_argument("--verdicts-only", action="store_true", help="recompute the verdicts from DIR's records")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        run_backend(a.one[0], a.one[1], a.out)
        return 0
    backends = [b for b in a.backends.split(",") if b]
    if a.verdicts_only:
        print(json.dumps(verdicts(a.out, backends), indent=1))
        return 0
    for b in backends:
        if b not in BACKENDS:
            raise SystemExit(f"unknown backend {b!r} (choose from {', '.join(BACKENDS)})")
    ckpt = write_checkpoint(Path("/tmp/fp8spec-models/sglang-kv-probe-tiny-dense"))
    env = sglang_env(deep_gemm=False)
    env = child_env(env)
    rc = 0
    for b in backends:
        if run_logged([sys.executable, "-m", MODULE, "--out", str(a.out), "--one", b, str(ckpt)], env,
                      a.out / f"kv_probe_sglang_{b}.log", int(os.environ.get("KV_PROBE_TIMEOUT_S", "420")),
                      f"kv_probe_sglang {b}") != 0:
            rc = 1
    result = verdicts(a.out, backends)
    (a.out / "kv_probe_sglang_verdicts.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result, indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
