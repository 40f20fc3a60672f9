"""Plot the real-engine rollout results: throughput and KV capacity per model and mode.

    python -m benchmarks.engine.plot_rollout out/engine/results.jsonl out/engine/rollout.png

The records are ``run_configs``' (its results.jsonl, an archive holding it, or a JSON list of records); the
DeepGEMM-off runs that finished are drawn.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common.records import read_records

MODES = [("bf16", "BF16"), ("fp8", "FP8 W8A8"), ("fp8kv", "FP8 W8A8 + FP8 KV")]


def main(src: str, dst: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = json.loads(Path(src).read_text(encoding="utf-8")) if src.endswith(".json") else read_records([src])
    rows = {(r["model"], r["mode"]): r for r in records if r.get("rc") == 0 and not r.get("deep_gemm")}
    models = sorted({m for m, _ in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.26
    for ax, key, label in ((axes[0], "output_tok_per_s", "output tokens/s"),
                           (axes[1], "kv_cache_tokens", "KV cache capacity (tokens)")):
        for j, (mode, name) in enumerate(MODES):
            vals = [rows.get((m, mode), {}).get(key, 0) for m in models]
            bars = ax.bar([i + (j - 1) * width for i in range(len(models))], vals, width, label=name)
            base = [rows.get((m, "bf16"), {}).get(key, 0) for m in models]
            for b, v, b0 in zip(bars, vals, base):
                if v and b0:
                    ax.annotate(f"{v / b0:.2f}x", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                                fontsize=7)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels([m.split("/")[-1] for m in models])
        ax.set_ylabel(label)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3)
    fig.suptitle("vLLM 0.24.0 on one H200, gpu_memory_utilization 0.6, 256 x (1024 in + 1536 out), CUDA graphs",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(dst, dpi=110, metadata={"Software": None})


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="run_configs' results.jsonl (or a .tgz holding it, or a JSON list of records)")
    ap.add_argument("png", help="the picture to write")
    a = ap.parse_args()
    main(a.records, a.png)
