"""SGLang 0.5.12 beside vLLM 0.24.0 on the same batch: output tokens/s and KV capacity per model and mode.

    python benchmarks/sglang/plot_engines.py OUT.png sbench0.tgz vbench0.tgz [more .tgz / results.jsonl ...]

Reads the records of ``run_sglang_configs.py`` (engine "sglang") and ``benchmarks/engine/run_configs.py`` (vLLM),
DeepGEMM-off runs only, and prints the table BENCHMARKS.md carries (speed-up against each engine's own BF16).
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

MODES = [("bf16", "BF16"), ("fp8", "FP8 W8A8"), ("fp8kv", "FP8 W8A8 + FP8 KV")]


def load(paths: list[str]) -> dict:
    recs = []
    for p in paths:
        if p.endswith((".tgz", ".tar.gz")):
            with tarfile.open(p) as tar:
                for m in tar.getmembers():
                    if m.name.endswith("results.jsonl"):
                        f = tar.extractfile(m)
                        assert f is not None
                        recs += [json.loads(x) for x in f.read().decode().splitlines() if x.strip()]
        else:
            recs += [json.loads(x) for x in Path(p).read_text().splitlines() if x.strip()]
    out = {}
    for r in recs:
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
    main(sys.argv[1], sys.argv[2:])
