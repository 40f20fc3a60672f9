"""H200 benchmark: bucketed blockwise FP8 quantization vs verl 0.9.1's per-tensor kernel.

For the full set of Qwen3-8B-shaped and Qwen3-30B-A3B-shaped linear weights (random bf16, right
shapes; 30B as per-expert 2-D tensors, router excluded) it measures, in one process:

* device-to-device copy bandwidth (bytes read + written / time) of a 4 GiB buffer;
* fp8spec ``quantize_flat`` (one launch for the whole model, and one launch per 2048 MB bucket, the
  verl default bucket size) and ``quantize_bucket`` (tensor-list API, host work included);
* verl 0.9.1 ``scaled_fp8_blockwise``, one call per tensor (loaded by file path from the wheel, so
  verl/__init__ with its ray/tensordict imports is not run);
* bit-identity of every fp8spec output against the torch reference (``blockquant.quantize_blockwise``
  run on the GPU), and how often verl's codes/scales agree with it.

Bytes per quantization: 2 B read + 1 B written per element + 4 B per block scale.
Usage: python -m benchmarks.bench_blockquant --verl-wheel verl-0.9.1-py3-none-any.whl [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
import zipfile

import torch

from fp8spec.runtime.quantization import blockquant as bq  # noqa: E402
from fp8spec.runtime.quantization import triton_blockquant as tbq  # noqa: E402

BLOCK = (128, 128)
TIMED_KEYS = ("flat_whole", "flat_whole_views", "flat_buckets", "flat_buckets_views", "list_whole", "list_buckets",
              "flat_whole_ue8m0", "flat_whole_ue8m0_fixed")
BUCKET_BYTES = 2048 << 20
DEV = "cuda"  # --smoke switches to cpu with tiny shapes, to test this script without a GPU


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class _Ev:
    """CUDA event, or a host clock on CPU (smoke mode)."""

    def __init__(self):
        self.e = torch.cuda.Event(enable_timing=True) if DEV == "cuda" else None
        self.t = None

    def record(self):
        if self.e is not None:
            self.e.record()
        else:
            self.t = time.perf_counter()

    def elapsed_time(self, other):
        if self.e is not None:
            return self.e.elapsed_time(other.e)
        return (other.t - self.t) * 1e3


def qwen3_8b_shapes():
    h, inter, q, kv = 4096, 12288, 32 * 128, 8 * 128
    per_layer = [(q, h), (kv, h), (kv, h), (h, q), (inter, h), (inter, h), (h, inter)]
    return per_layer * 36


def qwen3_30b_a3b_shapes():
    h, q, kv, moe_i, experts = 2048, 32 * 128, 4 * 128, 768, 128
    per_layer = [(q, h), (kv, h), (kv, h), (h, q)] + [(moe_i, h), (moe_i, h), (h, moe_i)] * experts
    return per_layer * 48


def load_verl_kernel(wheel: str):
    dst = "/tmp/fp8spec_verl_src"
    with zipfile.ZipFile(wheel) as z:
        z.extract("verl/utils/kernel/fp8_kernel.py", dst)
    path = os.path.join(dst, "verl/utils/kernel/fp8_kernel.py")
    spec = importlib.util.spec_from_file_location("verl_fp8_kernel_0_9_1", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(fn, reps, warmup=1):
    for _ in range(warmup):
        r = fn()
        del r
    sync()
    walls, gpus = [], []
    for _ in range(reps):
        e0, e1 = _Ev(), _Ev()
        sync()
        t0 = time.perf_counter()
        e0.record()
        r = fn()
        e1.record()
        sync()
        walls.append((time.perf_counter() - t0) * 1e3)
        gpus.append(e0.elapsed_time(e1))
        del r
    return {"wall_ms": statistics.median(walls), "gpu_ms": statistics.median(gpus), "wall_all": walls}


def copy_bandwidth(nbytes=4 << 30, reps=20):
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=DEV).normal_()
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), reps, warmup=3)
    src = dst = None  # the memory back before the next measurement (the timed closure reads these names)
    return 2 * nbytes / (t["gpu_ms"] * 1e-3) / 1e9, t


def build_model(shapes, seed):
    numel = [m * n for m, n in shapes]
    total = sum(numel)
    flat = torch.empty(total, dtype=torch.bfloat16, device=DEV)
    g = torch.Generator(device=DEV).manual_seed(seed)
    chunk = 1 << 30
    for o in range(0, total, chunk):
        flat[o : o + chunk].normal_(0.0, 0.02, generator=g)
    offs, o = [], 0
    for k in numel:
        offs.append(o)
        o += k
    tensors = [flat[o : o + k].view(s) for o, k, s in zip(offs, numel, shapes)]
    # per-tensor magnitude spread (real checkpoints differ by layer), a few outliers, one zero block
    for i, t in enumerate(tensors[:: max(1, len(tensors) // 64)]):
        t.mul_(2.0 ** ((i % 9) - 4))
    tensors[0][:128, :128] = 0
    tensors[1][5, 7] = 30.0
    return flat, tensors, offs


def quant_bytes(shapes):
    elems = sum(m * n for m, n in shapes)
    blocks = sum(-(-m // BLOCK[0]) * -(-n // BLOCK[1]) for m, n in shapes)
    return 3 * elems + 4 * blocks, elems


def buckets_of(shapes, offs, limit=BUCKET_BYTES):
    out, cur, cur_bytes = [], [], 0
    for i, (m, n) in enumerate(shapes):
        b = 2 * m * n
        if cur and cur_bytes + b > limit:
            out.append(cur)
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += b
    if cur:
        out.append(cur)
    return out


def bench_model(name, shapes, verl, copy_gbs, args, results):
    print(f"\n=== {name}: {len(shapes)} tensors", flush=True)
    flat, tensors, offs = build_model(shapes, seed=len(shapes))
    nbytes, elems = quant_bytes(shapes)
    floor_ms = nbytes / (copy_gbs * 1e9) * 1e3
    r = {"tensors": len(shapes), "elements": elems, "bytes_moved": nbytes, "copy_floor_ms": floor_ms}

    def gbs(ms):
        return nbytes / (ms * 1e-3) / 1e9

    # --- fp8spec: whole model in one launch (flat layout, plan built once)
    t0 = time.perf_counter()
    plan = tbq.make_flat_plan(shapes, offs, BLOCK, DEV)
    r["flat_plan_build_ms"] = (time.perf_counter() - t0) * 1e3
    best_nw, best = None, None
    for nw in (4, 8):
        t = timed(lambda nw=nw: tbq.quantize_flat(flat, plan, num_warps=nw, views=False), args.reps)
        print(f"  flat whole-model num_warps={nw}: gpu {t['gpu_ms']:.2f} ms wall {t['wall_ms']:.2f} ms", flush=True)
        r[f"flat_whole_nw{nw}"] = t
        if best is None or t["gpu_ms"] < best["gpu_ms"]:
            best_nw, best = nw, t
    r["num_warps"] = best_nw
    r["flat_whole"] = best
    r["flat_whole_views"] = timed(lambda: tbq.quantize_flat(flat, plan, num_warps=best_nw), args.reps)
    # --- fp8spec: one launch per 2048 MB bucket
    groups = buckets_of(shapes, offs)
    bplans = []
    for g in groups:
        base = offs[g[0]]
        bplans.append((base, sum(shapes[i][0] * shapes[i][1] for i in g),
                       tbq.make_flat_plan([shapes[i] for i in g], [offs[i] - base for i in g], BLOCK, DEV), g))

    def run_buckets(views):
        return [tbq.quantize_flat(flat[b : b + n], p, num_warps=best_nw, views=views) for b, n, p, _ in bplans]

    r["n_buckets"] = len(groups)
    r["flat_buckets"] = timed(lambda: run_buckets(False), args.reps)
    r["flat_buckets_views"] = timed(lambda: run_buckets(True), args.reps)
    # --- fp8spec: tensor-list API (what the verl hook calls), host work per call included
    r["list_whole"] = timed(lambda: tbq.quantize_bucket(tensors, BLOCK, num_warps=best_nw), args.reps)
    r["list_buckets"] = timed(
        lambda: [tbq.quantize_bucket([tensors[i] for i in g], BLOCK, num_warps=best_nw) for g in groups], args.reps
    )
    for fmt in ("ue8m0", "ue8m0_fixed"):
        r[f"flat_whole_{fmt}"] = timed(
            lambda fmt=fmt: tbq.quantize_flat(flat, plan, scale_fmt=fmt, num_warps=best_nw, views=False), args.reps
        )
    for k in TIMED_KEYS:
        t = r[k]
        t["gbs_gpu"], t["gbs_wall"] = gbs(t["gpu_ms"]), gbs(t["wall_ms"])
        t["pct_copy_gpu"], t["pct_copy_wall"] = 100 * t["gbs_gpu"] / copy_gbs, 100 * t["gbs_wall"] / copy_gbs
        print(f"  {k:24s} gpu {t['gpu_ms']:8.2f} ms ({t['pct_copy_gpu']:5.1f}% copy)  wall {t['wall_ms']:8.2f} ms "
              f"({t['pct_copy_wall']:5.1f}%)", flush=True)

    # --- bit identity vs the reference, every tensor, every scale format
    ident = {}
    for fmt in ("fp32", "ue8m0", "ue8m0_fixed"):
        stride = 1 if fmt == "fp32" else args.ref_stride
        sync()
        if DEV == "cuda":
            torch.cuda.empty_cache()
        poison = torch.empty(elems, dtype=torch.uint8, device=DEV).fill_(0xFF)
        del poison  # unwritten outputs would read back as NaN (0xFF)
        res = tbq.quantize_flat(flat, plan, scale_fmt=fmt, num_warps=best_nw)
        bad = checked = 0
        nan = bool(torch.isnan(res[-1][0].float()).any())
        for t, (q, s) in list(zip(tensors, res))[::stride]:
            rq, rs = bq.quantize_blockwise(t, BLOCK, fmt)
            checked += 1
            if not (torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)):
                bad += 1
        ident[fmt] = {"tensors_checked": checked, "mismatching_tensors": bad, "nan_in_last": nan}
        print(f"  bit-identity vs reference [{fmt}]: {checked - bad}/{checked} checked tensors identical", flush=True)
        del res
    if DEV == "cuda":
        torch.cuda.empty_cache()
    if DEV == "cuda":
        torch.cuda.empty_cache()
    list_res = tbq.quantize_bucket(tensors, BLOCK)  # tensor-list API, compared bucket by bucket with the flat API
    same = True
    for b, n, p, g in bplans:
        for j, (q, sc) in zip(g, tbq.quantize_flat(flat[b : b + n], p)):
            same &= torch.equal(q.view(torch.uint8), list_res[j][0].view(torch.uint8)) and torch.equal(sc, list_res[j][1])
    ident["list_api_vs_flat_bucket_api_identical"] = bool(same)
    print(f"  list API == flat bucket API: {same}", flush=True)
    r["bit_identity"] = ident
    flat_res = list_res

    # --- verl 0.9.1 scaled_fp8_blockwise, one call per tensor
    def run_verl():
        out = None
        for t in tensors:
            out = verl.scaled_fp8_blockwise(t, list(BLOCK))
        return out

    r["verl"] = timed(run_verl, args.verl_reps)
    r["verl"]["gbs_gpu"] = gbs(r["verl"]["gpu_ms"])
    r["verl"]["pct_copy_gpu"] = 100 * r["verl"]["gbs_gpu"] / copy_gbs
    print(f"  verl scaled_fp8_blockwise   gpu {r['verl']['gpu_ms']:8.2f} ms ({r['verl']['pct_copy_gpu']:5.1f}% copy) "
          f"wall {r['verl']['wall_ms']:8.2f} ms", flush=True)
    # how verl's codes compare with the reference (eps 1e-10 vs 1e-4 floor; approximate division in Triton)
    diff_codes = diff_scales = 0
    for t, (q, s) in zip(tensors, flat_res):
        vq, vs = verl.scaled_fp8_blockwise(t, list(BLOCK))
        diff_codes += int((vq.view(torch.uint8) != q.view(torch.uint8)).sum())
        diff_scales += int((vs.reshape(s.shape) != s).sum())
    r["verl_vs_reference"] = {"codes_differing": diff_codes, "scales_differing": diff_scales,
                              "codes_total": elems}
    print(f"  verl vs reference: {diff_codes} of {elems} codes differ, {diff_scales} scales differ", flush=True)
    r["speedup_vs_verl_gpu"] = r["verl"]["gpu_ms"] / r["flat_whole"]["gpu_ms"]
    r["speedup_vs_verl_buckets_wall"] = r["verl"]["wall_ms"] / r["flat_buckets_views"]["wall_ms"]
    r["speedup_vs_verl_list_buckets_wall"] = r["verl"]["wall_ms"] / r["list_buckets"]["wall_ms"]
    flat_res = plan = bplans = tensors = flat = None  # the memory back (the timed closures read these names)
    if DEV == "cuda":
        torch.cuda.empty_cache()
    results[name] = r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-wheel", required=True)
    ap.add_argument("--out", default="out/runtime", help="folder of the JSON record (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--verl-reps", type=int, default=3)
    ap.add_argument("--ref-stride", type=int, default=1, help="check every n-th tensor for the ue8m0 formats")
    ap.add_argument("--models", default="qwen3_8b,qwen3_30b_a3b")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: exercise the script only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    global DEV
    if args.smoke:
        DEV = "cpu"
        args.reps, args.verl_reps = 1, 1
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    kern = tbq.get_kernel()
    env = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (smoke)",
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "precise_div": bool(kern.precise_div) if kern is not None else None,
    }
    print(json.dumps(env), flush=True)
    verl = load_verl_kernel(args.verl_wheel)
    copy_gbs, ct = copy_bandwidth(64 << 20 if args.smoke else 4 << 30)
    env["copy_GBps"] = copy_gbs
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s (read+write), {ct['gpu_ms']:.3f} ms for 4 GiB", flush=True)
    results = {"env": env}
    models = {"qwen3_8b": qwen3_8b_shapes, "qwen3_30b_a3b": qwen3_30b_a3b_shapes}
    if args.smoke:
        models = {k: (lambda f=f: [(m // 16, n // 16) for m, n in f()[:: 97]]) for k, f in models.items()}
    for name in args.models.split(","):
        bench_model(name, models[name](), verl, copy_gbs, args, results)
    # copy bandwidth again at the end (drift check)
    env["copy_GBps_end"] = copy_bandwidth(64 << 20 if args.smoke else 4 << 30)[0]
    with open(os.path.join(args.out, "bench_blockquant.json"), "w") as f:
        json.dump(results, f, indent=1, default=float)
    print("\nmodel          path                    gpu_ms   %copy   wall_ms  %copy(wall)")
    for name in args.models.split(","):
        r = results[name]
        for k in TIMED_KEYS + ("verl",):
            t = r[k]
            pw = 100 * r["bytes_moved"] / (t["wall_ms"] * 1e-3) / 1e9 / copy_gbs
            print(f"{name:14s} {k:22s} {t['gpu_ms']:8.2f} {t['pct_copy_gpu']:6.1f}  {t['wall_ms']:8.2f}  {pw:6.1f}")
        print(f"{name:14s} floor {r['copy_floor_ms']:.2f} ms; speedup vs verl (gpu) {r['speedup_vs_verl_gpu']:.1f}x; "
              f"bit-identity {r['bit_identity']}")
    print(f"copy GB/s start {env['copy_GBps']:.0f} end {env['copy_GBps_end']:.0f}")


if __name__ == "__main__":
    main()
