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

The per-bucket gap between the hook and its kernels: the flat hook is timed under every
combination of the flat path's two host-side shortcuts (QuantSettings fields: ``L`` lean_prelaunch, ``F``
fast_launch; ``--`` is the plain path they replaced; both are always on in the runtime), rounds interleaved
across combinations (order reversed every other repetition), each round starting with the output
memory released and ``empty_cache``'d. One instrumented round per
combination of interest splits each bucket's hook time into: host time before the launch call
(``pre``, with the output allocation ``ensure`` inside it), the launch call (``launch``; Triton's own
``kernel[grid]`` part ``triton``), the host work after it (``post``: verl's selection, yielding), the
wait in ``synchronize`` (``sync``), and on the GPU the time from the launch call's start to the
kernel's end (``gpu``, CUDA events). Micro-measurements: a 1 GiB ``cudaMalloc`` after
``empty_cache``, ``synchronize`` round trips, the host cost of one launch through
``quantize_flat`` / ``kernel[grid]`` / the compiled kernel's runner.

``quant_weights`` needs verl's weight selection (``_classify_quant_weight``, which resolves vLLM
modules); a stand-in (set lookup) replaces it, and its cost is timed separately. Bit identity: every
selected tensor of one round against the torch reference (fp32 scales; every 10th tensor for the
UE8M0 formats), output names/order equal to the list path's.

Usage: python -m benchmarks.bench_verl_hook --verl-wheel verl-0.9.1-py3-none-any.whl [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import json
import os
import pickle
import statistics
import time
import types
import zipfile

import torch

from fp8spec.runtime.quantization import blockquant as bq  # noqa: E402
from fp8spec.runtime.quantization import flat_bucket, verl_quant  # noqa: E402
from fp8spec.runtime.quantization import flat_launcher as fl  # noqa: E402
from fp8spec.runtime.quantization import triton_blockquant as tbq  # noqa: E402
from fp8spec.runtime.quantization.flat_bucket import ENGINE  # noqa: E402
from fp8spec.runtime.settings import QuantSettings  # noqa: E402

BLOCK = (128, 128)
DEV = "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------- the models
def _attention_block(p: str, h: int, q: int, kv: int) -> list:
    """One Qwen3 layer's tensors before its MLP, in checkpoint order."""
    return [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)), (p + "self_attn.q_norm.weight", (128,)),
            (p + "self_attn.k_norm.weight", (128,)), (p + "post_attention_layernorm.weight", (h,))]


def qwen3_8b_stream():
    h, inter, q, kv, vocab, layers = 4096, 12288, 32 * 128, 8 * 128, 151936, 36
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += _attention_block(p, h, q, kv)
        out += [(p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
                (p + "mlp.down_proj.weight", (h, inter))]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]


def qwen3_30b_a3b_stream():
    h, q, kv, moe_i, experts, vocab, layers = 2048, 32 * 128, 4 * 128, 768, 128, 151936, 48
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += _attention_block(p, h, q, kv)
        out += [(p + "mlp.gate.weight", (experts, h))]  # router: not quantized by vLLM
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


def fake_quant_utils(fmt, fp8_names, knobs=None):
    def orig(weights, model, quant_config, dtype=torch.bfloat16):
        raise AssertionError("verl's own quant_weights must not run")

    mod = types.SimpleNamespace(
        quant_weights=orig, is_deepseek_v4_model=lambda m: False, is_vllm_ascend_mx_quant=lambda qc: False,
        fp8_state=types.SimpleNamespace(seen_params=set(), fp8_param_names=set()),
        _classify_quant_weight=lambda name, model, asc: "fp8" if name in fp8_names else None,
    )
    settings = dataclasses.replace(QuantSettings.from_env({"fast_block_quant"}), scale_fmt=fmt)
    if knobs is not None:
        settings.update(knobs)
    verl_quant.patch_vllm_quant(mod, settings)
    mod.settings = settings
    return mod


KNOBS = ("lean_prelaunch", "fast_launch")


def combo_knobs(name):
    """``"L-"`` -> {lean_prelaunch: True, fast_launch: False}"""
    assert len(name) == 2 and all(c in (letter, "-") for c, letter in zip(name, "LF")), name
    return {k: c != "-" for k, c in zip(KNOBS, name)}


ALL_COMBOS = ["".join(letter if (i >> (1 - j)) & 1 else "-" for j, letter in enumerate("LF")) for i in range(4)]


def use_combo(mod):
    """The output memory released and given back to the driver, as the receiver leaves it after a round."""
    ENGINE.release_outputs()
    if DEV == "cuda":
        torch.cuda.empty_cache()


class NoBuffers(torch.nn.Module):
    pass


# ------------------------------------------------------------------------------------------ rounds
def run_round(buffers, raws, quant_mod, split, flat, check=None, consume=True):
    """One weight sync. Returns (verl_receive_s, hook_s, per-bucket output names, round_start_s)."""
    qc = types.SimpleNamespace(weight_block_size=list(BLOCK))
    model = NoBuffers()
    t_recv = t_hook = t_start = 0.0
    names = []
    for buf, raw in zip(buffers, raws):
        t0 = time.perf_counter()
        metadata, weights = receive_views(buf, raw)
        param_updates, _, _ = split(model, weights)
        items = list(param_updates)
        t1 = time.perf_counter()
        if flat:
            with ENGINE.received_bucket(buf, metadata["bucket_meta"], weights, raw=raw):
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
    ENGINE.release_outputs()  # the receiver patch does this in _cleanup
    t_hook += time.perf_counter() - t0
    if DEV == "cuda":
        torch.cuda.empty_cache()  # verl's _cleanup (bucketed_weight_transfer.py 345): the next round allocates anew
    return t_recv, t_hook, names, t_start


def profile_round(buffers, raws, quant_mod, split):
    """One weight sync through the flat hook, instrumented per bucket (see the module docstring).
    The instrumentation (perf_counter reads, two CUDA events per bucket) adds a few microseconds."""
    perf = time.perf_counter
    qc = types.SimpleNamespace(weight_block_size=list(BLOCK))
    model = NoBuffers()
    recs = []
    state = {"cur": None}
    o_ensure, o_qf, o_call, o_kernel = flat_bucket.OutputArena.ensure, tbq.quantize_flat, fl.FlatLauncher.__call__, tbq._kernel

    def ensure(self):
        t0 = perf()
        o_ensure(self)
        if state["cur"] is not None:
            state["cur"]["ensure_us"] += (perf() - t0) * 1e6

    def timed(fn):
        @functools.wraps(fn)
        def w(*a, **k):
            cur = state["cur"]
            if cur is None or "l0" in cur:
                return fn(*a, **k)
            cur["l0"] = perf()
            if DEV == "cuda":
                cur["e0"].record()
            res = fn(*a, **k)
            if DEV == "cuda":
                cur["e1"].record()
            cur["l1"] = perf()
            return res

        return w

    class KernelProxy:
        precise_div = getattr(o_kernel, "precise_div", True)

        def __getitem__(self, grid):
            launch = o_kernel[grid]

            def f(*a, **k):
                t0 = perf()
                res = launch(*a, **k)
                if state["cur"] is not None:
                    state["cur"]["triton_us"] += (perf() - t0) * 1e6
                return res

            return f

    flat_bucket.OutputArena.ensure, tbq.quantize_flat, fl.FlatLauncher.__call__ = ensure, timed(o_qf), timed(o_call)
    if o_kernel is not None:
        tbq._kernel = KernelProxy()
    try:
        t_start = 0.0
        for buf, raw in zip(buffers, raws):
            metadata, weights = receive_views(buf, raw)
            param_updates, _, _ = split(model, weights)
            items = list(param_updates)
            cur = {"ensure_us": 0.0, "triton_us": 0.0}
            if DEV == "cuda":
                cur["e0"], cur["e1"] = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            state["cur"] = cur
            h0 = perf()
            with ENGINE.received_bucket(buf, metadata["bucket_meta"], weights, raw=raw):
                for _ in quant_mod.quant_weights(items, model, qc, dtype=torch.bfloat16):
                    pass
            g1 = perf()
            sync()
            h1 = perf()
            state["cur"] = None
            cur.update(h0=h0, g1=g1, h1=h1)
            recs.append(cur)
            del metadata, weights, param_updates, items
        t0 = perf()
        ENGINE.release_outputs()
        t_release = perf() - t0
    finally:
        flat_bucket.OutputArena.ensure, tbq.quantize_flat, fl.FlatLauncher.__call__ = o_ensure, o_qf, o_call
        tbq._kernel = o_kernel
        if DEV == "cuda":
            torch.cuda.empty_cache()
    rows = []
    for c in recs:
        if "l0" not in c:
            rows.append({"hook_us": 1e6 * (c["h1"] - c["h0"]), "launched": False})
            continue
        gpu = c["e0"].elapsed_time(c["e1"]) * 1e3 if DEV == "cuda" else 0.0
        launch = 1e6 * (c["l1"] - c["l0"])
        rows.append({
            "hook_us": 1e6 * (c["h1"] - c["h0"]), "pre_us": 1e6 * (c["l0"] - c["h0"]), "ensure_us": c["ensure_us"],
            "launch_us": launch, "triton_us": c["triton_us"], "post_us": 1e6 * (c["g1"] - c["l1"]),
            "sync_us": 1e6 * (c["h1"] - c["g1"]), "gpu_us": gpu,
            # the kernel itself: the GPU span minus the part of the launch call before the kernel was queued
            "kernel_est_us": gpu - launch, "launched": True,
        })
    return {"round_start_us": 1e6 * t_start, "release_us": 1e6 * t_release, "buckets": rows}


def summarize_profile(p, b2b_us):
    """Per-bucket means, and the gap (hook - back-to-back kernel time of that bucket) split up."""
    rows = [r for r in p["buckets"] if r["launched"]]
    keys = ("hook_us", "pre_us", "ensure_us", "launch_us", "triton_us", "post_us", "sync_us", "gpu_us", "kernel_est_us")
    out = {k: statistics.mean(r[k] for r in rows) for k in keys}
    out["first_bucket"] = {k: rows[0][k] for k in keys}
    out["b2b_kernel_us"] = statistics.mean(b2b_us[: len(rows)]) if b2b_us else None
    out["gap_us"] = out["hook_us"] - out["b2b_kernel_us"] if b2b_us else None
    out["round_start_us"], out["release_us"] = p["round_start_us"], p["release_us"]
    out["hook_total_ms"] = (sum(r["hook_us"] for r in p["buckets"]) + p["release_us"]) / 1e3
    return out


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
    mods = {fmt: fake_quant_utils(fmt, fp8_names) for fmt in ("fp32", "ue8m0", "ue8m0_fixed")}  # defaults
    combos = [c for c in args.combos.split(",") if c]
    cmods = {c: fake_quant_utils("fp32", fp8_names, combo_knobs(c)) for c in combos}
    raws0 = sender_messages(buckets, torch.bfloat16)
    r["metadata_bytes_per_bucket"] = [len(x) for x in raws0]
    r["defaults"] = {k: getattr(mods["fp32"].settings, k) for k in KNOBS}
    default_combo = "".join(letter if r["defaults"][k] else "-" for k, letter in zip(KNOBS, "LF"))
    r["default_combo"] = default_combo

    def rounds_list(reps, warm):
        recv, hook, first = [], [], None
        for i in range(warm + reps):
            tr, th, _, _ = run_round(buffers, sender_messages(buckets, torch.bfloat16), mods["fp32"], split, False)
            if i == 0:
                first = th
            if i >= warm:
                recv.append(tr)
                hook.append(th)
        return {"hook_ms": 1e3 * statistics.median(hook), "hook_all_ms": [1e3 * x for x in hook],
                "verl_receive_ms": 1e3 * statistics.median(recv), "first_round_ms": 1e3 * first}

    ENGINE.clear()
    fl.reset_fast_launch()
    for k2 in ENGINE.stats:
        ENGINE.stats[k2] = 0
    # every combination: one warm-up round (plans built, Triton compiled, runner convention found),
    # then interleaved timed rounds
    cres = {c: {"hook": [], "start": [], "recv": [], "first_round_ms": None} for c in combos}
    for c in combos:
        use_combo(cmods[c])
        raws = sender_messages(buckets, torch.bfloat16)  # fresh objects every step, as in verl
        assert raws == raws0  # same layout -> same bytes -> cache hit
        tr, th, _, ts = run_round(buffers, raws, cmods[c], split, True)
        cres[c]["first_round_ms"] = 1e3 * (th + ts)
    warm_stats = dict(ENGINE.stats)
    for k2 in ENGINE.stats:
        ENGINE.stats[k2] = 0
    for rep in range(args.reps):
        for c in (combos if rep % 2 == 0 else combos[::-1]):
            use_combo(cmods[c])
            tr, th, _, ts = run_round(buffers, sender_messages(buckets, torch.bfloat16), cmods[c], split, True)
            cres[c]["hook"].append(th)
            cres[c]["start"].append(ts)
            cres[c]["recv"].append(tr)
    r["flat_stats_warmup"] = warm_stats
    r["flat_stats"] = dict(ENGINE.stats)
    r["fast_launch"] = {"convention": fl._FAST["convention"], "error": repr(fl._FAST["error"]),
                        "disabled": fl._FAST["disabled"], "stats": dict(fl.FAST_STATS)}
    r["combos"] = {}
    for c in combos:
        t = cres[c]
        hook_ms = 1e3 * statistics.median(t["hook"])
        start_ms = 1e3 * statistics.median(t["start"])
        r["combos"][c] = {"hook_ms": hook_ms, "hook_all_ms": [1e3 * x for x in t["hook"]],
                          "round_start_ms": start_ms, "hook_plus_start_ms": hook_ms + start_ms,
                          "pct_copy": 100 * floor_ms / hook_ms, "pct_copy_with_start": 100 * floor_ms / (hook_ms + start_ms),
                          "verl_receive_ms": 1e3 * statistics.median(t["recv"]), "first_round_ms": t["first_round_ms"]}
        print(f"  hook flat [{c}]: {hook_ms:7.2f} ms ({100 * floor_ms / hook_ms:5.1f}% of copy bw; spread "
              f"{1e3 * min(t['hook']):.2f}-{1e3 * max(t['hook']):.2f}); round start {start_ms:.2f} ms", flush=True)
    r["flat"] = dict(r["combos"].get(default_combo, {}))
    r["list"] = rounds_list(args.list_reps, 1)
    r["list"]["pct_copy"] = 100 * floor_ms / r["list"]["hook_ms"]
    print(f"  hook list: {r['list']['hook_ms']:8.2f} ms ({r['list']['pct_copy']:5.1f}% of copy bw); verl's receive "
          f"work {r['list']['verl_receive_ms']:.2f} ms", flush=True)
    print(f"  flat stats {r['flat_stats']}; fast launch {r['fast_launch']}", flush=True)

    # the selection stand-in's cost (inside hook_ms) and the flat path's launches alone
    items_all = [n for n, _ in stream]
    cls = mods["fp32"]._classify_quant_weight
    t0 = time.perf_counter()
    for _ in range(5):
        [cls(n, None, False) for n in items_all]
    r["selection_stub_ms"] = 1e3 * (time.perf_counter() - t0) / 5
    raw_idx = {raw: i for i, raw in enumerate(raws0)}
    by_bucket = {}
    for key, lay in ENGINE.layouts.items():
        raw = key[0].raw if isinstance(key[0], flat_bucket.RawKey) else key[0][1]
        by_bucket.setdefault(raw_idx[raw], lay)
    pairs = [(buffers[i], by_bucket[i]) for i in sorted(by_bucket)]
    pairs = [(b[: b.numel() - b.numel() % 2].view(torch.bfloat16), lay) for b, lay in pairs]
    r["buckets_with_quantized_tensors"] = len(pairs)

    def kernels(evs=None):
        for i, (f, lay) in enumerate(pairs):
            if evs is not None:
                evs[i].record()
            tbq.quantize_flat(f, lay.plan, views=False)
        if evs is not None:
            evs[-1].record()

    kernels()
    ts, per_bucket = [], []
    for _ in range(args.reps):
        if DEV == "cuda":
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(len(pairs) + 1)]
            kernels(evs)
            sync()
            ts.append(evs[0].elapsed_time(evs[-1]))
            per_bucket.append([1e3 * evs[i].elapsed_time(evs[i + 1]) for i in range(len(pairs))])
        else:
            t0 = time.perf_counter()
            kernels()
            ts.append(1e3 * (time.perf_counter() - t0))
    r["kernels_only_ms"] = statistics.median(ts)
    b2b_us = [statistics.median(col) for col in zip(*per_bucket)] if per_bucket else []
    r["kernels_only_per_bucket_us"] = b2b_us
    r["kernels_only_pct_copy"] = 100 * floor_ms / r["kernels_only_ms"]
    print(f"  kernels only (one launch per bucket, back to back): {r['kernels_only_ms']:.2f} ms "
          f"({r['kernels_only_pct_copy']:.1f}%); selection stand-in {r['selection_stub_ms']:.2f} ms", flush=True)

    # where the gap is: one instrumented round per combination of interest (after a plain round of it)
    r["profile"] = {}
    for c in [c for c in args.profile_combos.split(",") if c in cmods]:
        use_combo(cmods[c])
        run_round(buffers, sender_messages(buckets, torch.bfloat16), cmods[c], split, True)
        use_combo(cmods[c])
        try:
            p = profile_round(buffers, sender_messages(buckets, torch.bfloat16), cmods[c], split)
            sm = summarize_profile(p, b2b_us)
        except Exception as e:
            r["profile"][c] = {"error": repr(e)}
            print(f"  profile [{c}] failed: {e!r}", flush=True)
            continue
        r["profile"][c] = {"summary": sm, "buckets": p["buckets"]}
        fb = sm["first_bucket"]
        print(f"  profile [{c}] per bucket (mean us): hook {sm['hook_us']:.0f} = pre {sm['pre_us']:.0f} (ensure "
              f"{sm['ensure_us']:.0f}) + launch {sm['launch_us']:.0f} (triton {sm['triton_us']:.0f}) + post "
              f"{sm['post_us']:.0f} + sync {sm['sync_us']:.0f}; gpu span {sm['gpu_us']:.0f}, kernel est "
              f"{sm['kernel_est_us']:.0f} vs back-to-back {sm['b2b_kernel_us'] or 0:.0f}; gap {sm['gap_us'] or 0:.0f}; "
              f"first bucket ensure {fb['ensure_us']:.0f} pre {fb['pre_us']:.0f}; round start "
              f"{sm['round_start_us']:.0f} release {sm['release_us']:.0f}", flush=True)

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
    all_on = dict.fromkeys(KNOBS, True)
    checks = [("LF", fmt, fake_quant_utils(fmt, fp8_names, all_on), 1 if fmt == "fp32" else args.ref_stride)
              for fmt in ("fp32", "ue8m0", "ue8m0_fixed")]
    checks += [(default_combo, "fp32", mods["fp32"], args.ref_stride), ("--", "fp32",
               fake_quant_utils("fp32", fp8_names, dict.fromkeys(KNOBS, False)), args.ref_stride)]
    for combo, fmt, qmod, stride in checks:
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

        # a warm round (the layouts of this knob set are cached, later launches are cache hits), then
        # the checked round on poisoned memory
        run_round(buffers, sender_messages(buckets, torch.bfloat16), qmod, split, True)
        ENGINE.release_outputs()
        if DEV == "cuda":
            torch.cuda.empty_cache()
            free = torch.cuda.mem_get_info()[0]
            p = torch.empty(min(free // 2, 8 << 30), dtype=torch.uint8, device=DEV).fill_(0xFF)
            del p
        hits = ENGINE.stats["cache_hits"]
        names = run_round(buffers, sender_messages(buckets, torch.bfloat16), qmod, split, True, check=check)[2]
        stat["cache_hits"] = ENGINE.stats["cache_hits"] - hits
        stat["names_equal_list_path"] = names == list_names
        ident[f"{combo}:{fmt}"] = stat
        print(f"  bit identity [{combo} {fmt}]: {stat['checked'] - stat['bad']}/{stat['checked']} identical, nan "
              f"{stat['nan']}, stream order == list path: {stat['names_equal_list_path']}, cache hits "
              f"{stat['cache_hits']}", flush=True)
    r["bit_identity"] = ident
    r["speedup_flat_vs_list"] = r["list"]["hook_ms"] / r["flat"]["hook_ms"]
    if "verl_kernel_ms" in r:
        r["speedup_flat_vs_verl_kernel"] = r["verl_kernel_ms"] / r["flat"]["hook_ms"]
    results[name] = r
    ENGINE.clear()
    buffers = pairs = None  # the memory back (the timed closures read these names)
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


def micro(args):
    """Host costs of the pieces the hook is made of, on their own (CUDA only)."""
    out = {}
    if DEV != "cuda":
        return out
    perf = time.perf_counter
    # (1) a 1 GiB allocation after empty_cache (what the first bucket of a round pays without P/K)
    ts = []
    for _ in range(5):
        torch.cuda.empty_cache()
        sync()
        t0 = perf()
        x = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
        ts.append(1e6 * (perf() - t0))
        del x
    torch.cuda.empty_cache()
    out["malloc_1GiB_us"] = ts
    # the arena's way: storage.resize_ from 0 after empty_cache
    st = torch.empty(0, dtype=torch.uint8, device=DEV).untyped_storage()
    ts = []
    for _ in range(5):
        st.resize_(0)
        torch.cuda.empty_cache()
        sync()
        t0 = perf()
        st.resize_(1 << 30)
        ts.append(1e6 * (perf() - t0))
    st.resize_(0)
    torch.cuda.empty_cache()
    out["storage_resize_1GiB_us"] = ts
    # (2) synchronize round trips: nothing queued; after a tiny kernel
    y = torch.zeros(1024, device=DEV)
    sync()
    ts, ts2 = [], []
    for _ in range(200):
        t0 = perf()
        sync()
        ts.append(1e6 * (perf() - t0))
        y.add_(1.0)
        t0 = perf()
        sync()
        ts2.append(1e6 * (perf() - t0))
    out["sync_idle_us"] = statistics.median(ts)
    out["sync_after_tiny_kernel_us"] = statistics.median(ts2)
    # (3) host cost of one launch of a small plan (64 tiles): quantize_flat with out=, kernel[grid]
    # directly, and the FlatLauncher through the compiled kernel's runner (each 500 launches queued)
    if tbq.triton_available():
        shapes = [(1024, 1024), (1024, 1024), (512, 1024), (512, 1024)]
        offs = [0, 1 << 20, 2 << 20, (2 << 20) + (512 << 10)]
        flat = torch.randn(3 << 20, device=DEV).to(torch.bfloat16)
        plan = tbq.make_flat_plan(shapes, offs, BLOCK, DEV)
        y8 = torch.empty(plan.y_total, dtype=bq.FP8_DTYPE, device=DEV)
        s32 = torch.empty(plan.s_total, dtype=torch.float32, device=DEV)
        kern = tbq.get_kernel()
        fast = fl.FlatLauncher(plan, (y8, s32), fast=True)
        slow = fl.FlatLauncher(plan, (y8, s32), fast=False)

        def direct():
            kern[(plan.n_tiles,)](flat, y8, s32, plan.meta_dev, plan.tile2mat, 1e-4, 448.0, 1.0, BM=128, BN=128,
                                  FMT=0, PRECISE_DIV=kern.precise_div, ALIGNED=plan.aligned, ROUND=0, num_warps=4)

        ways = {"quantize_flat": lambda: tbq.quantize_flat(flat, plan, views=False, out=(y8, s32)),
                "kernel_grid": direct, "launcher_jit": lambda: slow(flat), "launcher_runner": lambda: fast(flat)}
        res = {}
        for _ in range(2):
            for k, f in ways.items():
                f()
                sync()
                t0 = perf()
                for _ in range(500):
                    f()
                t1 = perf()
                sync()
                res.setdefault(k, []).append(1e6 * (t1 - t0) / 500)
        out["launch_host_us"] = {k: min(v) for k, v in res.items()}
        out["fast_launch_convention"] = fl._FAST["convention"]
    return out


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
    ap.add_argument("--out", default="out/runtime", help="folder of the JSON record (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--list-reps", type=int, default=3)
    ap.add_argument("--verl-reps", type=int, default=2)
    ap.add_argument("--ref-stride", type=int, default=10)
    ap.add_argument("--bucket-mb", type=int, default=2048)
    ap.add_argument("--models", default="qwen3_8b,qwen3_30b_a3b")
    ap.add_argument("--combos", default=",".join(ALL_COMBOS),
                    help="knob combinations to time (letters LF or '-', see the module docstring)")
    ap.add_argument("--profile-combos", default="--,L-,LF")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: exercise the script only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    global DEV
    streams = {"qwen3_8b": qwen3_8b_stream, "qwen3_30b_a3b": qwen3_30b_a3b_stream}
    if args.smoke:
        DEV = "cpu"
        args.reps = args.list_reps = args.verl_reps = 1
        args.bucket_mb = 2

        def shrink(f):
            return lambda: [(n, tuple(max(1, d // 32) for d in s)) for n, s in f()[:400]]

        streams = {k: shrink(f) for k, f in streams.items()}
    kern = tbq.get_kernel()
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
    try:
        results["micro"] = micro(args)
    except Exception as e:  # keep the run going: the timings below matter more
        results["micro"] = {"error": repr(e)}
    print(f"micro: {json.dumps(results['micro'])}", flush=True)
    for name in args.models.split(","):
        env[f"copy_GBps_before_{name}"] = copy_bandwidth(64 << 20 if args.smoke else 4 << 30)
        bench_model(name, streams[name](), verl_kernel, split, env["copy_GBps"], args, results)
        r = results[name]
        r["copy_GBps_before"] = env[f"copy_GBps_before_{name}"]
        for c in r["combos"].values():
            c["pct_copy_vs_bw_before_model"] = 100 * r["bytes_moved"] / (r["copy_GBps_before"] * 1e9) * 1e3 / c["hook_ms"]
        with open(os.path.join(args.out, "bench_verl_hook.json"), "w") as f:  # partial results survive a crash
            json.dump(results, f, indent=1, default=float)
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
    print("\nmodel          knobs  hook ms  %copy  %copy(bw before model)  round start ms  %copy(hook+start)")
    for name in args.models.split(","):
        r = results[name]
        for c, t in r["combos"].items():
            print(f"{name:14s} {c}  {t['hook_ms']:7.2f}  {t['pct_copy']:5.1f}  {t['pct_copy_vs_bw_before_model']:5.1f}"
                  f"                  {t['round_start_ms']:6.2f}          {t['pct_copy_with_start']:5.1f}")
    print(f"copy GB/s start {env['copy_GBps']:.0f} end {env['copy_GBps_end']:.0f} before models "
          f"{[round(env[k]) for k in env if k.startswith('copy_GBps_before_')]}")


if __name__ == "__main__":
    main()
