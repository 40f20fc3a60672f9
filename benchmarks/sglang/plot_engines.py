"""SGLang 0.5.12 beside vLLM 0.24.0 on the same batch: output tokens/s and KV capacity per model and mode.

    python -m benchmarks.sglang.plot_engines out/engines.png out/sglang/results.jsonl out/engine/results.jsonl

Reads the records of ``run_sglang_configs`` (engine "sglang") and ``benchmarks.engine.run_configs`` (vLLM), from
results.jsonl files or archives holding them, DeepGEMM-off runs only, and prints the table docs/results.md carries
(speed-up against each engine's own BF16).
"""

from __future__ import annotations

import argparse

from benchmarks.common.records import read_records

MODES = [("bf16", "BF16"), ("fp8", "FP8 W8A8"), ("fp8kv", "FP8 W8A8 + FP8 KV")]


def load(paths: list[str]) -> dict:
    out = {}
    for r in read_records(paths):
        if r.get("rc") == 0 and not r.get("deep_gemm") and r.get("attention_backend", "flashinfer") != "triton":
            out[(r.get("engine", "vllm"), r["model"], r["mode"])] = r
    return out


def main(dst: str, srcs: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load(srcs)
    models = sorted({m for _, m, _ in rows})
    print("| model | mode | engine | KV cache tokens | retractions / preemptions | generate s | output tok/s | vs own BF16 |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for m in models:
        for mode, name in MODES:
            for eng in ("vllm", "sglang"):
                r = rows.get((eng, m, mode))
                if not r:
                    continue
                base = rows.get((eng, m, "bf16"), {}).get("output_tok_per_s")
                pre = r.get("retractions") if eng == "sglang" else r.get("preemptions")
                speed = f"{r['output_tok_per_s'] / base:.2f}" if base else "-"
                print(f"| {m.split('/')[-1]} | {name} | {eng} | {r.get('kv_cache_tokens') or 0:,} | {pre} | "
                      f"{r.get('generate_s')} | {r.get('output_tok_per_s') or 0:,.0f} | {speed} |")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.13
    for ax, key, label in ((axes[0], "output_tok_per_s", "output tokens/s"),
                           (axes[1], "kv_cache_tokens", "KV cache capacity (tokens)")):
        k = 0
        for eng in ("vllm", "sglang"):
            for mode, name in MODES:
                vals = [rows.get((eng, m, mode), {}).get(key) or 0 for m in models]
                ax.bar([i + (k - 2.5) * width for i in range(len(models))], vals, width,
                       label=f"{'vLLM 0.24.0' if eng == 'vllm' else 'SGLang 0.5.12'} {name}",
                       hatch="//" if eng == "sglang" else None)
                k += 1
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels([m.split("/")[-1] for m in models])
        ax.set_ylabel(label)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=3)
    fig.suptitle("vLLM 0.24.0 and SGLang 0.5.12 on one H200, the same batch and memory share", fontsize=9)
    fig.tight_layout(rect=(0, 0.14, 1, 0.95))
    fig.savefig(dst, dpi=130)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("png", help="the picture to write")
    ap.add_argument("records", nargs="+", help="results.jsonl files or .tgz archives holding them")
    a = ap.parse_args()
    main(a.png, a.records)
