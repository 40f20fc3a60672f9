"""H200 benchmark of the verl hook end to end: weight-sync buckets -> ``quant_weights`` -> (name, tensor) pairs.

What verl 0.9.1 does in the vLLM worker for every bucket (``verl/workers/rollout/vllm_rollout/``):
``BucketedWeightReceiver.receive_weights`` (bucketed_weight_transfer.py 269-309) unpickles the
bucket's metadata (286), builds one view of its flat buffer per tensor (288-298), calls the callback
(300) and synchronizes (301); the callback (utils.py 307-324) -> ``_update_weights`` (367) ->
``split_buffer_updates`` (387) -> ``load_quanted_weights`` (393) -> ``list(weights)`` + ``quant_weights``
(vllm_quant_utils.py 452-453), whose output ``model.load_weights`` consumes (474).

This script rebuilds that on one GPU, in one process, for the full Qwen3-8B-shaped and
Qwen3-30B-A3B-shaped weight streams (HF names and order, embeddings, norms, router and lm_head
included; experts as per-expert 2-D tensors; random bf16 values), packed into 2048 MB buckets exactly
as ``BucketedWeightSender`` packs them (lines 115-163; verl's default
``update_weights_bucket_megabytes``). Per round (one weight sync) it measures, with a host clock and
the per-bucket synchronize verl does:

* ``verl_receive``: verl's own per-tensor work before the hook (unpickle, per-tensor views,
  ``split_buffer_updates`` loaded from the wheel, ``list``) -- not the hook's, reported separately;
* ``hook_flat``: fp8spec's ``quant_weights`` with the received bucket known (one launch per bucket,
  plan cached by layout, output views reused), generator consumed, + synchronize; the output memory
  is given back at the end of the round as the receiver patch does;
* ``hook_list``: the same hook without the bucket (the tensor-list path, ``quantize_bucket``);
* ``verl_kernel``: verl 0.9.1's ``scaled_fp8_blockwise`` once per selected tensor (its quant_weights
  loop without the selection), + synchronize per bucket;
* ``kernels_only``: the flat path's launches back to back (CUDA events), no host work.

``quant_weights`` needs verl's weight selection (``_classify_quant_weight``, which resolves vLLM
modules); a stand-in (set lookup) replaces it, and its cost is timed separately. Bit identity: every
selected tensor of one round against the torch reference (fp32 scales; every 10th tensor for the
UE8M0 formats), output names/order equal to the list path's.

Usage: python benchmarks/bench_verl_hook.py --verl-wheel .whl/verl-0.9.1-py3-none-any.whl --out DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import statistics
import sys
import time
import types
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fp8spec.runtime import blockquant as bq  # noqa: E402
from fp8spec.runtime import triton_blockquant as tbq  # noqa: E402
from fp8spec.runtime import verl_patch  # noqa: E402

BLOCK = (128, 128)
DEV = "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------- the models
def qwen3_8b_stream():
    h, inter, q, kv, vocab, layers = 4096, 12288, 32 * 128, 8 * 128, 151936, 36
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (q, h)),
                (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
                (p + "self_attn.o_proj.weight", (h, q)), (p + "self_attn.q_norm.weight", (128,)),
                (p + "self_attn.k_norm.weight", (128,)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
                (p + "mlp.down_proj.weight", (h, inter))]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]


def qwen3_30b_a3b_stream():
    h, q, kv, moe_i, experts, vocab, layers = 2048, 32 * 128, 4 * 128, 768, 128, 151936, 48
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (q, h)),
                (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
                (p + "self_attn.o_proj.weight", (h, q)), (p + "self_attn.q_norm.weight", (128,)),
                (p + "self_attn.k_norm.weight", (128,)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate.weight", (experts, h))]  # router: not quantized by vLLM
        for e in range(experts):
            out += [(p + f"mlp.experts.{e}.gate_proj.weight", (moe_i, h)),
                    (p + f"mlp.experts.{e}.up_proj.weight", (moe_i, h)),
                    (p + f"mlp.experts.{e}.down_proj.weight", (h, moe_i))]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]


def is_fp8_name(name):
    """vLLM's FP8 layers of these models: attention and MLP/expert projections (not embed, norms,
    router ``mlp.gate``, lm_head); stands for verl's ``_classify_quant_weight`` (vllm_quant_utils.py 328)."""
    return name.endswith("_proj.weight")


# ------------------------------------------------------------------------- verl's transport, rebuilt
def pack(stream, bucket_size, esize=2):
    """BucketedWeightSender's packing (bucketed_weight_transfer.py 119-158): [(entries, is_last)]."""
    buckets, cur, offset = [], [], 0
    for name, shape in stream:
        nbytes = esize * _prod(shape)
        offset = (offset + esize - 1) // esize * esize
        if offset + nbytes > bucket_size and cur:
            buckets.append(cur)
            cur, offset = [], 0
        if offset + nbytes > bucket_size:
            raise ValueError(f"{name} is larger than the bucket (would travel with its own IPC handle)")
        cur.append((name, shape, offset))
        offset += nbytes
    buckets.append(cur)
    return buckets


def sender_messages(buckets, dtype):
    """The metadata messages, built fresh as the sender builds them every step (148-154, 135, 163)."""
    out = []
    for k, entries in enumerate(buckets):
        meta = {n: {"name": n, "shape": torch.Size(s), "dtype": dtype, "offset": o, "handle": None}
                for n, s, o in entries}
        out.append(pickle.dumps({"bucket_meta": meta, "is_last": k == len(buckets) - 1}, pickle.HIGHEST_PROTOCOL))
    return out


def receive_views(buffer, raw):
    """The receiver's per-bucket loop body (286-298), CUDA IPC mode."""
    metadata = pickle.loads(raw)
    weights = []
    for name, meta in metadata["bucket_meta"].items():
        shape, dtype, offset, handle = meta["shape"], meta["dtype"], meta["offset"], meta["handle"]
        assert handle is None
        size = dtype.itemsize * shape.numel()
        tensor = buffer[offset : offset + size].view(dtype=dtype).view(shape)
        weights.append((name, tensor))
    return metadata, weights


def _prod(s):
    p = 1
    for d in s:
        p *= d
    return p


def load_from_wheel(wheel, member, modname):
    dst = "/tmp/fp8spec_verl_src"
    with zipfile.ZipFile(wheel) as z:
        z.extract(member, dst)
    spec = importlib.util.spec_from_file_location(modname, os.path.join(dst, member))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_quant_utils(fmt, fp8_names):
    def orig(weights, model, quant_config, dtype=torch.bfloat16):
        raise AssertionError("verl's own quant_weights must not run")

    mod = types.SimpleNamespace(
        quant_weights=orig, is_deepseek_v4_model=lambda m: False, is_vllm_ascend_mx_quant=lambda qc: False,
        fp8_state=types.SimpleNamespace(seen_params=set(), fp8_param_names=set()),
        _classify_quant_weight=lambda name, model, asc: "fp8" if name in fp8_names else None,
    )
    settings = verl_patch.quant_settings({"fast_block_quant"})
    settings["scale_fmt"] = fmt
    verl_patch.patch_vllm_quant(mod, settings)
    return mod


class NoBuffers(torch.nn.Module):
    pass


# ------------------------------------------------------------------------------------------ rounds
def run_round(buffers, raws, quant_mod, split, flat, check=None, consume=True):
    """One weight sync. Returns (verl_receive_s, hook_s, per-bucket output names)."""
    qc = types.SimpleNamespace(weight_block_size=list(BLOCK))
    model = NoBuffers()
    t_recv = t_hook = 0.0
    names = []
    for buf, raw in zip(buffers, raws):
        t0 = time.perf_counter()
        metadata, weights = receive_views(buf, raw)
        param_updates, _, _ = split(model, weights)
        items = list(param_updates)
        t1 = time.perf_counter()
        if flat:
            with verl_patch.received_bucket(buf, metadata["bucket_meta"], weights, raw=raw):
                gen = quant_mod.quant_weights(items, model, qc, dtype=torch.bfloat16)
                out = list(gen) if (check or not consume) else None
                if out is None:
                    for _ in gen:
                        pass
                if check:
                    check(out, items)
        else:
            gen = quant_mod.quant_weights(items, model, qc, dtype=torch.bfloat16)
            out = list(gen) if check else None
            if out is None:
                for _ in gen:
                    pass
            if check:
                check(out, items)
        sync()  # bucketed_weight_transfer.py 301
        t2 = time.perf_counter()
        t_recv += t1 - t0
        t_hook += t2 - t1
        if check:
            names.append([n for n, _ in out])
        del metadata, weights, param_updates, items
    t0 = time.perf_counter()
    verl_patch.release_outputs()  # the receiver patch does this in _cleanup
    t_hook += time.perf_counter() - t0
    if DEV == "cuda":
        torch.cuda.empty_cache()  # verl's _cleanup (bucketed_weight_transfer.py 345): the next round allocates anew
    return t_recv, t_hook, names


def bench_model(name, stream, verl_kernel, split, copy_gbs, args, results):
    print(f"\n=== {name}: {len(stream)} tensors in the stream", flush=True)
    bucket_size = args.bucket_mb << 20
    buckets = pack(stream, bucket_size)
    fp8_names = {n for n, _ in stream if is_fp8_name(n)}
    sel_shapes = [s for n, s in stream if n in fp8_names]
    elems = sum(m * n for m, n in sel_shapes)
    blocks = sum(-(-m // BLOCK[0]) * -(-n // BLOCK[1]) for m, n in sel_shapes)
    nbytes = 3 * elems + 4 * blocks
    floor_ms = nbytes / (copy_gbs * 1e9) * 1e3
    r = {"stream_tensors": len(stream), "quantized_tensors": len(sel_shapes), "elements": elems,
         "bytes_moved": nbytes, "copy_floor_ms": floor_ms, "buckets": len(buckets),
         "bucket_mb": args.bucket_mb, "tensors_per_bucket": [len(b) for b in buckets]}
    print(f"  {len(sel_shapes)} quantized tensors, {elems / 1e9:.2f} G elements, {len(buckets)} buckets of "
          f"{args.bucket_mb} MB; floor {floor_ms:.2f} ms", flush=True)

    # the receiver's buffers, one per bucket (verl reuses one buffer; separate ones keep every bucket's
    # data in place so the hook can be timed alone), filled like bench_blockquant's weights
    g = torch.Generator(device=DEV).manual_seed(len(stream))
    buffers = []
    for entries in buckets:
        used = entries[-1][2] + 2 * _prod(entries[-1][1])
        b = torch.empty(bucket_size if DEV == "cuda" else used, dtype=torch.uint8, device=DEV)
        b[: used - used % 2].view(torch.bfloat16).normal_(0.0, 0.02, generator=g)
        buffers.append(b)
    k = 0
    for bi, entries in enumerate(buckets):
        for n, s, o in entries:
            if n in fp8_names:
                if k % 64 == 0:
                    buffers[bi][o : o + 2 * _prod(s)].view(torch.bfloat16).mul_(2.0 ** ((k // 64) % 9 - 4))
                if k == 0:
                    buffers[bi][o : o + 2 * _prod(s)].view(torch.bfloat16).view(s)[:128, :128] = 0
                if k == 1:
                    buffers[bi][o : o + 2 * _prod(s)].view(torch.bfloat16).view(s)[5, 7] = 30.0
                k += 1
    sync()
    mods = {fmt: fake_quant_utils(fmt, fp8_names) for fmt in ("fp32", "ue8m0", "ue8m0_fixed")}
    raws0 = sender_messages(buckets, torch.bfloat16)
    r["metadata_bytes_per_bucket"] = [len(x) for x in raws0]

    def rounds(flat, reps, warm):
        recv, hook, first = [], [], None
        for i in range(warm + reps):
            raws = sender_messages(buckets, torch.bfloat16)  # fresh objects every step, as in verl
            if i == 0:
                assert raws == raws0  # same layout -> same bytes -> cache hit
            tr, th, _ = run_round(buffers, raws, mods["fp32"], split, flat)
            if i == 0:
                first = th
            if i >= warm:
                recv.append(tr)
                hook.append(th)
        return {"hook_ms": 1e3 * statistics.median(hook), "hook_all_ms": [1e3 * x for x in hook],
                "verl_receive_ms": 1e3 * statistics.median(recv), "first_round_ms": 1e3 * first}

    verl_patch.clear_flat_cache()
    for k2 in verl_patch.FLAT_STATS:
        verl_patch.FLAT_STATS[k2] = 0
    r["flat"] = rounds(True, args.reps, 1)
    r["flat_stats"] = dict(verl_patch.FLAT_STATS)
    r["list"] = rounds(False, args.list_reps, 1)
    for key in ("flat", "list"):
        t = r[key]
        t["pct_copy"] = 100 * floor_ms / t["hook_ms"]
        print(f"  hook {key:5s}: {t['hook_ms']:8.2f} ms ({t['pct_copy']:5.1f}% of copy bw); first round "
              f"{t['first_round_ms']:.1f} ms; verl's receive work {t['verl_receive_ms']:.2f} ms", flush=True)
    print(f"  flat stats {r['flat_stats']}", flush=True)

    # the selection stand-in's cost (inside hook_ms) and the flat path's launches alone
    items_all = [n for n, _ in stream]
    cls = mods["fp32"]._classify_quant_weight
    t0 = time.perf_counter()
    for _ in range(5):
        [cls(n, None, False) for n in items_all]
    r["selection_stub_ms"] = 1e3 * (time.perf_counter() - t0) / 5
    raw_idx = {raw: i for i, raw in enumerate(raws0)}
    pairs = [(buffers[raw_idx[key[0][1]]], lay) for key, lay in verl_patch._LAYOUTS.items()]
    pairs = [(b[: b.numel() - b.numel() % 2].view(torch.bfloat16), lay) for b, lay in pairs]
    r["buckets_with_quantized_tensors"] = len(pairs)

    def kernels():
        for f, lay in pairs:
            tbq.quantize_flat(f, lay.plan, views=False)

    kernels()
    ts = []
    for _ in range(args.reps):
        if DEV == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            kernels()
            e1.record()
            sync()
            ts.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            kernels()
            ts.append(1e3 * (time.perf_counter() - t0))
    r["kernels_only_ms"] = statistics.median(ts)
    r["kernels_only_pct_copy"] = 100 * floor_ms / r["kernels_only_ms"]
    print(f"  kernels only (one launch per bucket, back to back): {r['kernels_only_ms']:.2f} ms "
          f"({r['kernels_only_pct_copy']:.1f}%); selection stand-in {r['selection_stub_ms']:.2f} ms", flush=True)

    # verl 0.9.1's kernel, one call per selected tensor, synchronize per bucket
    def run_verl():
        for buf, entries in zip(buffers, buckets):
            for n, s, o in entries:
                if n in fp8_names:
                    verl_kernel.scaled_fp8_blockwise(buf[o : o + 2 * _prod(s)].view(torch.bfloat16).view(s), list(BLOCK))
            sync()

    if verl_kernel is not None:
        run_verl()
        ts = []
        for _ in range(args.verl_reps):
            t0 = time.perf_counter()
            run_verl()
            ts.append(1e3 * (time.perf_counter() - t0))
        r["verl_kernel_ms"] = statistics.median(ts)
        r["verl_kernel_pct_copy"] = 100 * floor_ms / r["verl_kernel_ms"]
        print(f"  verl scaled_fp8_blockwise per tensor: {r['verl_kernel_ms']:.2f} ms ({r['verl_kernel_pct_copy']:.1f}%)",
              flush=True)

    # bit identity, every quantized tensor (fp32) / every 10th (UE8M0 formats); poisoned memory
    ident = {}
    list_names = run_round(buffers, raws0, mods["fp32"], split, False, check=lambda o, i: None)[2]
    for fmt in ("fp32", "ue8m0", "ue8m0_fixed"):
        stride = 1 if fmt == "fp32" else args.ref_stride
        stat = {"checked": 0, "bad": 0, "nan": 0, "passthrough_not_same": 0}
        counter = [0]

        def check(out, items, fmt=fmt, stride=stride, stat=stat, counter=counter):
            d = dict(out)
            for n, v in items:
                if n not in fp8_names:
                    stat["passthrough_not_same"] += d[n] is not v
                    continue
                counter[0] += 1
                if counter[0] % stride:
                    continue
                q, s = d[n], d[bq.scale_name(n)]
                rq, rs = bq.quantize_blockwise(v, BLOCK, fmt)
                stat["checked"] += 1
                stat["bad"] += not (torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs))
                stat["nan"] += bool(torch.isnan(q.float()).any()) or bool(torch.isnan(s).any())

        verl_patch.release_outputs()
        if DEV == "cuda":
            torch.cuda.empty_cache()
            free = torch.cuda.mem_get_info()[0]
            p = torch.empty(min(free // 2, 8 << 30), dtype=torch.uint8, device=DEV).fill_(0xFF)
            del p
        names = run_round(buffers, sender_messages(buckets, torch.bfloat16), mods[fmt], split, True, check=check)[2]
        stat["names_equal_list_path"] = names == list_names
        ident[fmt] = stat
        print(f"  bit identity [{fmt}]: {stat['checked'] - stat['bad']}/{stat['checked']} identical, nan {stat['nan']}, "
              f"stream order == list path: {stat['names_equal_list_path']}", flush=True)
    r["bit_identity"] = ident
    r["speedup_flat_vs_list"] = r["list"]["hook_ms"] / r["flat"]["hook_ms"]
    if "verl_kernel_ms" in r:
        r["speedup_flat_vs_verl_kernel"] = r["verl_kernel_ms"] / r["flat"]["hook_ms"]
    results[name] = r
    verl_patch.clear_flat_cache()
    del buffers, pairs
    if DEV == "cuda":
        torch.cuda.empty_cache()


def copy_bandwidth(nbytes):
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=DEV).normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync()
    ts = []
    for _ in range(20):
        if DEV == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            dst.copy_(src)
            e1.record()
            sync()
            ts.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            ts.append(1e3 * (time.perf_counter() - t0))
    return 2 * nbytes / (statistics.median(ts) * 1e-3) / 1e9


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-wheel", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--list-reps", type=int, default=3)
    ap.add_argument("--verl-reps", type=int, default=2)
    ap.add_argument("--ref-stride", type=int, default=10)
    ap.add_argument("--bucket-mb", type=int, default=2048)
    ap.add_argument("--models", default="qwen3_8b,qwen3_30b_a3b")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: exercise the script only")
    args = ap.parse_args()
    global DEV
    streams = {"qwen3_8b": qwen3_8b_stream, "qwen3_30b_a3b": qwen3_30b_a3b_stream}
    if args.smoke:
        DEV = "cpu"
        args.reps = args.list_reps = args.verl_reps = 1
        args.bucket_mb = 2

        def shrink(f):
            return lambda: [(n, tuple(max(1, d // 32) for d in s)) for n, s in f()[:400]]

        streams = {k: shrink(f) for k, f in streams.items()}
    kern = tbq._get_kernel()
    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = None
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu",
           "torch": torch.__version__, "triton": tv, "cuda": torch.version.cuda,
           "kernel": kern is not None, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
           "host_cpus": os.cpu_count(), "host_cpu": _cpu_model()}
    print(json.dumps(env), flush=True)
    split = load_from_wheel(args.verl_wheel, "verl/workers/rollout/vllm_rollout/weight_update_utils.py",
                            "verl_weight_update_utils_0_9_1").split_buffer_updates
    verl_kernel = None
    if DEV == "cuda":
        verl_kernel = load_from_wheel(args.verl_wheel, "verl/utils/kernel/fp8_kernel.py", "verl_fp8_kernel_0_9_1")
    env["copy_GBps"] = copy_bandwidth(64 << 20 if args.smoke else 4 << 30)
    print(f"device-to-device copy: {env['copy_GBps']:.0f} GB/s (read+write)", flush=True)
    results = {"env": env}
    for name in args.models.split(","):
        bench_model(name, streams[name](), verl_kernel, split, env["copy_GBps"], args, results)
    env["copy_GBps_end"] = copy_bandwidth(64 << 20 if args.smoke else 4 << 30)
    with open(os.path.join(args.out, "bench_verl_hook.json"), "w") as f:
        json.dump(results, f, indent=1, default=float)
    print("\nmodel          path                         ms    %copy")
    for name in args.models.split(","):
        r = results[name]
        rows = [("floor (copy bandwidth)", r["copy_floor_ms"]), ("hook, flat bucket (new)", r["flat"]["hook_ms"]),
                ("hook, tensor list (old)", r["list"]["hook_ms"]), ("kernels only", r["kernels_only_ms"])]
        if "verl_kernel_ms" in r:
            rows.append(("verl kernel per tensor", r["verl_kernel_ms"]))
        for label, ms in rows:
            print(f"{name:14s} {label:26s} {ms:8.2f} {100 * r['copy_floor_ms'] / ms:6.1f}")
        print(f"{name:14s} verl's receive work (not hook) {r['flat']['verl_receive_ms']:.2f} ms; first round "
              f"{r['flat']['first_round_ms']:.1f} ms; bit identity {json.dumps(r['bit_identity'])}")
    print(f"copy GB/s start {env['copy_GBps']:.0f} end {env['copy_GBps_end']:.0f}")


if __name__ == "__main__":
    main()
