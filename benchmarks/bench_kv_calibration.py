"""H200 benchmark: cost of per-step KV-scale calibration hooks on a Qwen3-8B-shaped forward.

Builds a Hugging Face Qwen3 model with Qwen3-8B's shapes (random bf16 weights, no download), runs
no-grad forwards (the old-log-prob pass verl already runs) of ``--batch x --seq`` tokens and times,
interleaved: (a) no calibrator, (b) calibrator attached but not armed, (c) armed. Also times the
decoder stack alone (no lm_head; the per-layer worst case) and reports what a fresh calibration pass
would cost instead (one extra forward). Checks that the outputs are bit-identical with and without
hooks and prints the calibrated scales of layer 0.
Usage: python -m benchmarks.bench_kv_calibration --layers 36 --batch 4 --seq 4096 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from fp8spec.runtime.kv_scales import kv_calibration as kc  # noqa: E402

DEV = "cuda"  # --smoke: cpu and a tiny model, to test the script without a GPU


def build(layers: int, smoke: bool = False):
    import transformers

    cfg = transformers.Qwen3Config(
        vocab_size=151936 if not smoke else 512,
        hidden_size=4096 if not smoke else 64,
        intermediate_size=12288 if not smoke else 128,
        num_hidden_layers=layers,
        num_attention_heads=32 if not smoke else 4,
        num_key_value_heads=8 if not smoke else 2,
        head_dim=128 if not smoke else 16,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(DEV):
        model = transformers.Qwen3ForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    return model.eval(), transformers.__version__


def time_fn(fn, reps):
    out = []
    for _ in range(reps):
        if DEV == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            e0.record()
            r = fn()
            e1.record()
            torch.cuda.synchronize()
            out.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            r = fn()
            out.append((time.perf_counter() - t0) * 1e3)
        del r
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="out/runtime", help="folder of the JSON record (default: %(default)s)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    global DEV
    if args.smoke:
        DEV = "cpu"
        args.layers, args.batch, args.seq, args.reps, args.rounds = 2, 1, 64, 2, 1

    model, tf_version = build(args.layers, args.smoke)
    g = torch.Generator(device=DEV).manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device=DEV, generator=g)
    cal = kc.KVScaleCalibrator(args.layers)

    def full():
        with torch.no_grad():
            return model(ids, logits_to_keep=0).logits

    def decoder():
        with torch.no_grad():
            return model.model(ids).last_hidden_state

    def armed(fn):
        def run():
            with cal.calibrating():
                return fn()

        return run

    res = {k: [] for k in ("full_base", "full_attached", "full_armed", "dec_base", "dec_attached", "dec_armed")}
    # warm-up and output identity
    ref = full().float()
    cal.attach(model)
    with cal.calibrating():
        got = full().float()
    identical = torch.equal(ref, got)
    del ref, got
    scales0 = [float(x) for x in cal.scales()[0]]
    for _ in range(args.rounds):
        cal.detach()
        kc.uninstall_hf_attention_wrappers()
        time_fn(full, 1)
        res["full_base"] += time_fn(full, args.reps)
        res["dec_base"] += time_fn(decoder, args.reps)
        cal.attach(model)
        time_fn(full, 1)
        res["full_attached"] += time_fn(full, args.reps)
        res["dec_attached"] += time_fn(decoder, args.reps)
        res["full_armed"] += time_fn(armed(full), args.reps)
        res["dec_armed"] += time_fn(armed(decoder), args.reps)
    med = {k: statistics.median(v) for k, v in res.items()}
    spread = {k: (min(v), max(v)) for k, v in res.items()}
    tokens = args.batch * args.seq
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (smoke)",
        "torch": torch.__version__,
        "transformers": tf_version,
        "layers": args.layers,
        "tokens": tokens,
        "attn_implementation": "sdpa",
        "median_ms": med,
        "min_max_ms": spread,
        "overhead_full_armed_pct": 100 * (med["full_armed"] / med["full_base"] - 1),
        "overhead_full_attached_pct": 100 * (med["full_attached"] / med["full_base"] - 1),
        "overhead_decoder_armed_pct": 100 * (med["dec_armed"] / med["dec_base"] - 1),
        "fresh_pass_ms_per_1k_tokens": med["full_base"] / tokens * 1000,
        "outputs_bit_identical": identical,
        "layer0_scales_qkv": scales0,
    }
    print(json.dumps(summary, indent=1))
    with open(os.path.join(args.out, "bench_kv_calibration.json"), "w") as f:
        json.dump({"summary": summary, "raw_ms": res}, f, indent=1)


if __name__ == "__main__":
    main()
