"""FP8 weight sync through verl 0.9.1's real path into a real vLLM 0.24.0 engine: verl's quantizer vs fp8spec's
``fast_block_quant``, checked against a fresh engine, and timed.

    python -m benchmarks.engine.weight_sync_probe --out DIR [--cases tiny-dense,tiny-moe,qwen3-8b,qwen3-30b-a3b]
    WS_DTYPE=fp32 python -m benchmarks.engine.weight_sync_probe ...   # an FSDP trainer's float32 weights

Per case, one process per engine (``--one``):

* ``verl``: verl's ``vLLMColocateWorkerExtension`` as the worker extension; the driver streams BF16 weights
  (checkpoint names, HF layout) with verl's own ``BucketedWeightSender`` (CUDA IPC, 2048 MiB buckets, verl's
  default) while ``update_weights_from_ipc`` runs in the engine: verl's receiver, verl's ``quant_weights``
  (``scaled_fp8_blockwise``) and vLLM's ``load_weights`` + verl's post-load processing. Three syncs, timed.
* ``patch``: the same with ``FP8SPEC_RUNTIME_PATCHES=fast_block_quant`` (one launch per bucket).
* ``direct``: the same with ``FP8SPEC_RUNTIME_PATCHES=direct_sync``
  (``fp8spec.runtime.weight_sync.receiver.direct_sync_hook``: each bucket quantized straight into the engine's
  parameters, the rest through verl's receiver).
* ``fresh`` (tiny cases and Qwen3-8B): a new engine that loads the same weights from an FP8 checkpoint written by the driver
  with verl's own ``scaled_fp8_blockwise`` (``weight`` e4m3 + ``weight_scale_inv``), i.e. without any sync.

Every engine reports a byte-exact fingerprint of each parameter it holds after its update (or load) and the
greedy log-probs of fixed prompts. Verdicts: verl == patch (== direct) byte for byte; the synced engines == the
fresh one; log-probs equal; sync seconds per step for verl, patch and direct.

Options (environment, so ``run_h200_engine.sh`` passes them through):

* ``WS_SYNCS=N`` (default 3): syncs per engine; the medians leave out the first (warm-up) when N >= 2.
* ``WS_BREAKDOWN=1``: after the timed syncs, one more sync with the stage timers of ``ws_breakdown.py`` installed
  (engine and driver side, CUDA-synchronised); ``ws_<case>_<path>_<dtype>_breakdown.json`` + a Markdown table.
* ``WS_TP=N`` (default 1): every engine, the fresh ones too, at rollout tensor parallel N (N GPUs). As in verl's
  colocated loop, trainer rank r streams the full weights from GPU r to engine rank r's handle, and each rank's
  loaders (or the direct path's plan for that rank) take its slice; the fingerprints and the verdicts are per rank
  (``rank<r>/<parameter>``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.common.cli import child_env, default_out, run_logged
from benchmarks.engine.engine_common import MODELS, catalog_config, verl_fp8_quantization
from benchmarks.engine.ws_breakdown import Timers, install_sender, render

MODULE = "benchmarks.engine.weight_sync_probe"

PATCH_ENV = {"patch": "fast_block_quant", "direct": "direct_sync"}  # path -> FP8SPEC_RUNTIME_PATCHES
SYNCED = ("verl", "patch", "direct")


def probe_options(env=None) -> dict:
    """WS_SYNCS (>= 1), WS_BREAKDOWN (0/1), WS_DTYPE (bf16/fp32) and WS_TP (>= 1); ValueError on anything else."""
    env = os.environ if env is None else env
    syncs, tp = int(env.get("WS_SYNCS", "3")), int(env.get("WS_TP", "1"))
    dtype = env.get("WS_DTYPE", "bf16")
    if syncs < 1 or tp < 1 or dtype not in ("bf16", "fp32") or env.get("WS_BREAKDOWN", "0") not in ("0", "1"):
        raise ValueError(f"WS_SYNCS >= 1, WS_TP >= 1, WS_DTYPE bf16|fp32, WS_BREAKDOWN 0|1; got {syncs}, {tp}, {dtype}")
    return {"syncs": syncs, "dtype": dtype, "breakdown": env.get("WS_BREAKDOWN", "0") == "1", "tp": tp}


def timed_median(times: list) -> float:
    """Median sync seconds after the first (warm-up) sync when there are at least two."""
    return statistics.median(times[1:] if len(times) >= 2 else times)

TINY = {
    "tiny-dense": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 8192,
                       "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 4, "num_attention_heads": 8,
                       "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 4096,
                       "tie_word_embeddings": False, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                       "torch_dtype": "bfloat16", "hidden_act": "silu", "attention_bias": False},
    "tiny-moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 8192,
                     "hidden_size": 1024, "intermediate_size": 3072, "moe_intermediate_size": 256, "num_experts": 8,
                     "num_experts_per_tok": 2, "decoder_sparse_step": 1, "norm_topk_prob": True, "mlp_only_layers": [],
                     "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
                     "max_position_embeddings": 4096, "tie_word_embeddings": False, "rope_theta": 1000000.0,
                     "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "hidden_act": "silu", "attention_bias": False},
}
# cases whose fresh engines (an FP8 checkpoint written by the driver, loaded without a sync) the probe can build:
# Qwen3-8B's two checkpoints are 2 x 8.7 GB; Qwen3-30B-A3B's would be 2 x 31 GB on a 64 GB disk
FRESH_CASES = (*TINY, "qwen3-8b")
# ... and those with room for the reference checkpoint alone (the byte check against fresh-ref, 31 GB)
FRESH_REF_CASES = (*FRESH_CASES, "qwen3-30b-a3b")
FRESH = ("fresh", "fresh-ref", "fresh-ref-again")  # engines loaded from a checkpoint, no sync
# verl's handle for job 0, replica 0, rank r (verl/workers/rollout/vllm_rollout/utils.py _get_zmq_handle: an
# engine without data parallelism uses its worker's local rank, which is the TP rank)
ZMQ = "ipc:///tmp/rl-colocate-zmq-0-replica-0-rank-{rank}.sock"


def zmq_handle(rank: int) -> str:
    return ZMQ.format(rank=rank)


def rank_keyed(per_rank: list[dict]) -> dict:
    """One engine's fingerprints from every TP rank as one mapping: the parameter names at TP 1, ``rank<r>/<name>``
    above, so two engines compare rank by rank."""
    if len(per_rank) == 1:
        return dict(per_rank[0])
    return {f"rank{r}/{name}": fp for r, fps in enumerate(per_rank) for name, fp in fps.items()}


def case_config(case: str) -> dict:
    return dict(TINY[case]) if case in TINY else catalog_config(MODELS[case])


def checkpoint_shapes(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Checkpoint (HF) parameter names and shapes of a Qwen3 / Qwen3-MoE config, in checkpoint order."""
    h, d = cfg["hidden_size"], cfg["head_dim"]
    nh, nkv, v = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (nh * d, h)), (p + "self_attn.k_proj.weight", (nkv * d, h)),
                (p + "self_attn.v_proj.weight", (nkv * d, h)), (p + "self_attn.o_proj.weight", (h, nh * d)),
                (p + "self_attn.q_norm.weight", (d,)), (p + "self_attn.k_norm.weight", (d,))]
        if cfg.get("num_experts"):
            m = cfg["moe_intermediate_size"]
            out.append((p + "mlp.gate.weight", (cfg["num_experts"], h)))
            for j in range(cfg["num_experts"]):
                e = f"{p}mlp.experts.{j}."
                out += [(e + "gate_proj.weight", (m, h)), (e + "up_proj.weight", (m, h)),
                        (e + "down_proj.weight", (h, m))]
        else:
            m = cfg["intermediate_size"]
            out += [(p + "mlp.gate_proj.weight", (m, h)), (p + "mlp.up_proj.weight", (m, h)),
                    (p + "mlp.down_proj.weight", (h, m))]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def weight_dtype():
    """What the trainer streams: BF16 (Megatron's params) or, with WS_DTYPE=fp32, FSDP's float32 master weights."""
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[os.environ.get("WS_DTYPE", "bf16")]


def make_weights(cfg: dict, step: int, device: str = "cuda"):
    """Seeded weights on the GPU (norms near 1, the rest N(0, 0.02); lm_head x8 for clear greedy margins); the same
    values on every device."""
    import torch

    gen = torch.Generator(device=device).manual_seed(1000 + step)
    weights = []
    for name, shape in checkpoint_shapes(cfg):
        t = torch.empty(shape, dtype=weight_dtype(), device=device)
        if name.endswith("norm.weight"):
            t.uniform_(0.9, 1.1, generator=gen)
        else:
            t.normal_(0.0, 0.16 if name == "lm_head.weight" else 0.02, generator=gen)
        weights.append((name, t))
    return weights


def copy_floor_s(cfg: dict, reps: int = 5) -> float:
    """The copy floor: one device-to-device copy of every byte the trainer sends (median of ``reps``), read and
    written once, as a sync must at least read its input and write the engine's parameters."""
    import torch

    n = sum(math.prod(shape) for _, shape in checkpoint_shapes(cfg)) * torch.finfo(weight_dtype()).bits // 8
    # Copied in chunks of at most 4 GiB (a 30B model's float32 weights would not fit twice beside the engine);
    # each chunk is as long as a sync's buckets, so the bandwidth is the same.
    chunk = min(n, 4 << 30)
    src = torch.empty(chunk, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    full, rest = divmod(n, chunk)
    times = []
    for _ in range(reps + 1):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(full):
            dst.copy_(src)
        if rest:
            dst[:rest].copy_(src[:rest])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return timed_median(times)


def is_quantized(name: str, cfg: dict) -> bool:
    """What verl/vLLM quantize: every linear weight but the router, lm_head and embeddings."""
    return name.endswith("_proj.weight")


def write_fp8_checkpoint(cfg: dict, weights, folder: Path, quantizer: str = "verl") -> dict:
    """The same weights as an FP8 checkpoint, quantized by verl's own scaled_fp8_blockwise (``verl``) or by
    fp8spec's torch reference (``reference``: IEEE divisions, vLLM's amax floor). Returns how many codes and
    scales the two quantizers disagree on over these weights."""
    import torch
    from safetensors.torch import save_file
    from verl.utils.kernel.fp8_kernel import scaled_fp8_blockwise

    from fp8spec.runtime.quantization.blockquant import quantize_blockwise

    tensors, stats = {}, {"codes": 0, "codes_differ": 0, "scales": 0, "scales_differ": 0,
                          "max_scale_rel_diff": 0.0}
    for name, t in weights:
        t = t.to(torch.bfloat16)  # verl quantizes v.to(bfloat16); vLLM's BF16 params hold the rest the same way
        if is_quantized(name, cfg):
            qv, sv = scaled_fp8_blockwise(t, weight_block_size=[128, 128])
            sv = sv.squeeze(-1)
            qr, sr = quantize_blockwise(t, (128, 128))
            stats["codes"] += qv.numel()
            stats["codes_differ"] += int((qv.view(torch.uint8) != qr.view(torch.uint8)).sum())
            stats["scales"] += sv.numel()
            stats["scales_differ"] += int((sv != sr.reshape(sv.shape)).sum())
            rel = float(((sv - sr.reshape(sv.shape)).abs() / sr.reshape(sv.shape)).max())
            stats["max_scale_rel_diff"] = max(stats["max_scale_rel_diff"], rel)
            q, sc = (qv, sv) if quantizer == "verl" else (qr, sr.reshape(sv.shape))
            tensors[name] = q.contiguous().cpu()
            tensors[name + "_scale_inv"] = sc.contiguous().cpu()
        else:
            tensors[name] = t.contiguous().cpu()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    conf = dict(cfg, quantization_config=verl_fp8_quantization(cfg["num_hidden_layers"]))
    (folder / "config.json").write_text(json.dumps(conf, indent=1), encoding="utf-8")
    return stats


def run_engine(case: str, path: str, out: Path, util: float) -> None:
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    import fp8spec.runtime  # noqa: F401  (activates FP8SPEC_RUNTIME_PATCHES here first, in a bundle's order)

    cfg = case_config(case)
    tp = probe_options()["tp"]
    folder = Path("/tmp/fp8spec-models") / f"ws-{case}"
    kw = {"skip_tokenizer_init": True, "tensor_parallel_size": tp, "seed": 0, "gpu_memory_utilization": util,
          "max_model_len": 1024,
          # WS_EAGER=0: CUDA graphs as in main_ppo (the V1 runner then wraps the model)
          "enforce_eager": os.environ.get("WS_EAGER", "1") == "1", "enable_prefix_caching": False,
          "worker_extension_cls": "benchmarks.engine.ws_probe_ext.ProbeVerlExt"}
    if path.startswith("fresh"):  # fresh-ref-again: a second engine process on the same checkpoint (the control)
        llm = LLM(model=str(folder / ("fp8" if path == "fresh" else "fp8ref")), **kw)
    else:
        (folder / "dummy").mkdir(parents=True, exist_ok=True)
        (folder / "dummy" / "config.json").write_text(json.dumps(cfg, indent=1), encoding="utf-8")
        llm = LLM(model=str(folder / "dummy"), load_format="dummy", quantization="fp8",
                  hf_overrides={"quantization_config": verl_fp8_quantization(cfg["num_hidden_layers"])}, **kw)
    record = {"case": case, "path": path, "patched": llm.collective_rpc("probe_patched")[0],
              "dtype": os.environ.get("WS_DTYPE", "bf16"), "tp": tp}
    if not path.startswith("fresh"):
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

        opts = probe_options()
        import verl.workers.rollout.vllm_rollout.bucketed_weight_transfer as transfer

        # the trainer side's fused bucket fill and its two-half pipeline, installed by the runtime itself with
        # direct_sync (before sync_timing, as in a bundle); importing the module above ran those hooks
        if os.environ.get("WS_SYNC_TIMING", "1") == "1":  # the trainer side's split, one line per sync
            from fp8spec.runtime.weight_sync.sender.sync_timing import patch_bucket_sender

            patch_bucket_sender(transfer)  # idempotent: the runtime did it where the patches name sync_timing
        from fp8spec.runtime.weight_sync.sender import fused_send, gather_copy, sync_timing

        cls = transfer.BucketedWeightSender
        record["fused_send"] = bool(getattr(cls, fused_send.FLAG, False))
        record["sync_timing"] = bool(getattr(cls, sync_timing.FLAG, False))
        if path == "direct" and not record["fused_send"]:
            raise SystemExit("the runtime did not install the fused fill on the direct path")
        record["send_split"] = []

        def one_sync() -> float:
            # the same values each step (the last sync is checked), the full weights on every rank's GPU
            weights = [make_weights(cfg, step=0, device=f"cuda:{r}") for r in range(tp)]
            for r in range(tp):
                torch.cuda.synchronize(r)
            result = {}

            def receive():
                result["r"] = llm.collective_rpc("update_weights_from_ipc",
                                                 kwargs={"peft_config": None, "base_sync_done": True, "use_shm": False})

            def send(rank: int):
                torch.cuda.set_device(rank)  # verl's sender allocates its bucket on the current device
                sender = BucketedWeightSender(zmq_handle=zmq_handle(rank),
                                              bucket_size_mb=int(os.environ.get("WS_BUCKET_MB", "2048")))
                asyncio.run(sender.async_send_weights(iter(weights[rank])))
                return sender

            t0 = time.perf_counter()
            th = threading.Thread(target=receive)
            th.start()
            others = [threading.Thread(target=send, args=(r,)) for r in range(1, tp)]  # trainer ranks 1..tp-1
            for o in others:
                o.start()
            sender = send(0)
            for o in others:
                o.join()
            th.join()
            dt = time.perf_counter() - t0
            st = getattr(sender, "_fp8spec_send_times", None)
            if st is not None:
                record["send_split"].append({"tensors": st.tensors, "buckets": st.buckets, "gpu_wait_s": st.gpu_wait,
                                             "engine_s": st.engine, "line": st.line(),
                                             "table": dict(gather_copy.STATS)})
            del weights
            torch.cuda.empty_cache()
            return dt

        times = [one_sync() for _ in range(opts["syncs"])]
        record["sync_s"] = times
        record["sync_s_median"] = timed_median(times)
        record["copy_floor_s"] = copy_floor_s(cfg)
        if opts["breakdown"]:
            timers = Timers(sync=torch.cuda.synchronize)
            install_sender(timers)
            record["breakdown_installed"] = llm.collective_rpc("probe_breakdown_install")[0]
            dt = one_sync()
            worker = llm.collective_rpc("probe_breakdown_take")[0]
            stages = dict(worker["stages"], **timers.record()["stages"])
            bd = {"title": f"{case} {path} {opts['dtype']}", "case": case, "path": path, "dtype": opts["dtype"],
                  "sync_s": dt, "plain_sync_s": record["sync_s_median"], "stages": stages}
            stem = f"ws_{case}_{path}_{opts['dtype']}_breakdown"
            (out / f"{stem}.json").write_text(json.dumps(bd, indent=1), encoding="utf-8")
            (out / f"{stem}.md").write_text(render(bd, bd["title"]), encoding="utf-8")
        record["patched_after"] = llm.collective_rpc("probe_patched")[0]
    record["fingerprints"] = rank_keyed(llm.collective_rpc("probe_fingerprints"))
    gen = torch.Generator().manual_seed(1)
    prompts = [TokensPrompt(prompt_token_ids=torch.randint(0, cfg["vocab_size"], (32,), generator=gen).tolist())
               for _ in range(4)]
    sp = SamplingParams(temperature=0.0, max_tokens=8, logprobs=0, ignore_eos=True, detokenize=False)
    record["greedy"] = [{"tokens": list(o.outputs[0].token_ids),
                         "logprobs": [lp[t].logprob for t, lp in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]}
                        for o in llm.generate(prompts, sp, use_tqdm=False)]
    (out / f"ws_{case}_{path}.json").write_text(json.dumps(record), encoding="utf-8")


def prepare_fresh(case: str, out: Path, paths: list[str]) -> None:
    """The FP8 checkpoints the fresh engines of ``paths`` load (fresh: verl's quantizer, fresh-ref: the
    reference), each only when asked for, so Qwen3-30B-A3B's reference one fits the disk alone."""
    import torch

    cfg = case_config(case)
    weights = make_weights(cfg, step=0)
    root = Path("/tmp/fp8spec-models") / f"ws-{case}"
    stats = {}
    for path, folder, quantizer in (("fresh", "fp8", "verl"), ("fresh-ref", "fp8ref", "reference")):
        if path in paths or (path == "fresh-ref" and "fresh-ref-again" in paths):
            stats = write_fp8_checkpoint(cfg, weights, root / folder, quantizer)
    (out / f"ws_{case}_quantizers.json").write_text(json.dumps(stats), encoding="utf-8")
    del weights
    torch.cuda.empty_cache()


def verdict(out: Path, case: str) -> dict:
    recs = {p: json.loads((out / f"ws_{case}_{p}.json").read_text())
            for p in (*SYNCED, *FRESH) if (out / f"ws_{case}_{p}.json").exists()}
    v = {"paths": sorted(recs), "tp": sorted({rec.get("tp", 1) for rec in recs.values()})}
    q = out / f"ws_{case}_quantizers.json"
    if q.exists():
        v["verl_kernel_vs_reference"] = json.loads(q.read_text())
    if "fresh-ref" in recs and "patch" in recs:
        fp, fr = recs["patch"]["fingerprints"], recs["fresh-ref"]["fingerprints"]
        v["patch_vs_fresh_ref_params_differ"] = sorted(n for n in fp if fp[n] != fr.get(n))[:20]
        v["greedy_patch_eq_fresh_ref"] = recs["patch"]["greedy"] == recs["fresh-ref"]["greedy"]
    if "verl" in recs and "patch" in recs:
        fv, fp = recs["verl"]["fingerprints"], recs["patch"]["fingerprints"]
        v["verl_vs_patch_params_differ"] = sorted(n for n in fv if fv[n] != fp.get(n))[:20]
        v["verl_vs_patch_param_count"] = [len(fv), len(fp)]
        v["patch_active"] = recs["patch"].get("patched_after")
        v["verl_active"] = recs["verl"].get("patched_after")
        v["greedy_verl_eq_patch"] = recs["verl"]["greedy"] == recs["patch"]["greedy"]
    synced = [p for p in SYNCED if p in recs]
    v["sync_s_median"] = {p: timed_median(recs[p]["sync_s"]) for p in synced}
    v["sync_s_all"] = {p: recs[p]["sync_s"] for p in synced}
    v["copy_floor_s"] = {p: recs[p]["copy_floor_s"] for p in synced if "copy_floor_s" in recs[p]}
    if "direct" in recs:
        fd = recs["direct"]["fingerprints"]
        v["direct_active"] = recs["direct"].get("patched_after")
        for ref in ("verl", "fresh-ref", "fresh"):
            if ref in recs:
                fr = recs[ref]["fingerprints"]
                v[f"direct_vs_{ref}_params_differ"] = sorted(n for n in fd if fd[n] != fr.get(n))[:20]
                v[f"greedy_direct_eq_{ref}"] = recs["direct"]["greedy"] == recs[ref]["greedy"]
                v[f"greedy_direct_vs_{ref}"] = greedy_compare(recs["direct"]["greedy"], recs[ref]["greedy"])
    if "fresh-ref" in recs and "fresh-ref-again" in recs:
        # the control: two engine processes on one checkpoint; where they disagree, so may a synced engine
        fa, fb = recs["fresh-ref"]["fingerprints"], recs["fresh-ref-again"]["fingerprints"]
        v["fresh-ref_vs_again_params_differ"] = sorted(n for n in fa if fa[n] != fb.get(n))[:20]
        v["greedy_fresh-ref_vs_again"] = greedy_compare(recs["fresh-ref"]["greedy"], recs["fresh-ref-again"]["greedy"])
    if "fresh" in recs and "verl" in recs:
        fv, ff = recs["verl"]["fingerprints"], recs["fresh"]["fingerprints"]
        v["synced_vs_fresh_params_differ"] = sorted(n for n in fv if fv[n] != ff.get(n))[:20]
        v["greedy_synced_eq_fresh"] = recs["verl"]["greedy"] == recs["fresh"]["greedy"]
        if not v["greedy_synced_eq_fresh"]:
            v["greedy_fresh"] = recs["fresh"]["greedy"][0]
            v["greedy_verl"] = recs["verl"]["greedy"][0]
    return v


def greedy_compare(a: list[dict], b: list[dict]) -> list[dict]:
    """Per prompt: the first decode step whose token differs (None: all equal), whether the first token's
    log-prob is bit-equal (prefill on identical weights is), the largest log-prob gap up to that step."""
    rows = []
    for x, y in zip(a, b):
        tx, ty = x["tokens"], y["tokens"]
        k = next((i for i, (s, t) in enumerate(zip(tx, ty)) if s != t), None)
        upto = len(tx) if k is None else k + 1
        gaps = [abs(p - q) for p, q in zip(x["logprobs"][:upto], y["logprobs"][:upto])]
        rows.append({"first_token_differs_at": k, "first_logprob_equal": x["logprobs"][0] == y["logprobs"][0],
                     "max_logprob_gap": max(gaps, default=0.0)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out("weight_sync_probe"), help="default: %(default)s")
    ap.add_argument("--cases", default="tiny-dense,tiny-moe,qwen3-8b,qwen3-30b-a3b")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "PATH"))
    ap.add_argument("--prepare-fresh", metavar="CASE")
    ap.add_argument("--fresh-paths", default="fresh,fresh-ref", help="with --prepare-fresh: the checkpoints to write")
    ap.add_argument("--util", type=float, default=0.3)
    ap.add_argument("--paths", default="verl,patch,fresh",
                    help="engines per case: verl, patch, direct; tiny cases and qwen3-8b also fresh, fresh-ref; "
                         "qwen3-30b-a3b also fresh-ref; fresh-ref-again: a second fresh-ref engine (the control "
                         "for greedy equality across processes)")
    a = ap.parse_args()
    try:
        probe_options()
    except ValueError as exc:
        ap.error(str(exc))
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        run_engine(a.one[0], a.one[1], a.out, a.util)
        return 0
    if a.prepare_fresh:
        prepare_fresh(a.prepare_fresh, a.out, a.fresh_paths.split(","))
        return 0
    base_env = dict(os.environ, VLLM_USE_FLASHINFER_SAMPLER="0", VLLM_USE_DEEP_GEMM="0", VLLM_MOE_USE_DEEP_GEMM="0",
                    PYTHONUNBUFFERED="1")
    if probe_options()["tp"] > 1:  # the driver holds CUDA contexts: the engine's TP workers cannot be forked
        base_env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    base_env = child_env(base_env)
    base_env.pop("FP8SPEC_RUNTIME_PATCHES", None)
    verdicts, rc = {}, 0
    for case in a.cases.split(","):
        paths = [p for p in a.paths.split(",") if case in FRESH_CASES or not p.startswith("fresh")
                 or (p.startswith("fresh-ref") and case in FRESH_REF_CASES)]
        if case in TINY or any(p.startswith("fresh") for p in paths):
            fresh = [p for p in paths if p.startswith("fresh")] if case not in TINY else ["fresh", "fresh-ref"]
            subprocess.run([sys.executable, "-m", MODULE, "--out", str(a.out), "--prepare-fresh", case,
                            "--fresh-paths", ",".join(fresh)], env=base_env, check=True)
        for path in paths:
            env = dict(base_env)
            if path in PATCH_ENV:  # with the trainer side's timing line (measurement) unless WS_SYNC_TIMING=0
                timing = ",sync_timing" if os.environ.get("WS_SYNC_TIMING", "1") == "1" else ""
                env["FP8SPEC_RUNTIME_PATCHES"] = PATCH_ENV[path] + timing
            # the runtime's own activation (direct path only), its defaults unless the probe is told otherwise
            if "WS_SEND_CAST_BF16" in os.environ:  # else the runtime's default
                env["FP8SPEC_SEND_CAST_BF16"] = os.environ["WS_SEND_CAST_BF16"]
            util = "0.3" if case in TINY or case == "qwen3-8b" else "0.35"
            if run_logged([sys.executable, "-m", MODULE, "--out", str(a.out), "--util", util, "--one", case, path],
                          env, a.out / f"ws_{case}_{path}.log", 420, f"weight_sync {case} {path}") != 0:
                rc = 1
        try:
            verdicts[case] = verdict(a.out, case)
        except Exception as exc:
            verdicts[case] = {"error": repr(exc)}
        print(case, json.dumps(verdicts[case]), flush=True)
    (a.out / "ws_verdicts.json").write_text(json.dumps(verdicts, indent=1), encoding="utf-8")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
