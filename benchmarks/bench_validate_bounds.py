"""CPU benchmark: the worst patterns and model configs inside fp8spec's bounds (target: `fp8spec
validate` under 2 s and 500 MB).

Each case writes a spec (and a config.json where it needs one) into a temporary folder and runs the whole
``fp8spec validate`` command in a fresh process, interpreter start and imports included; it records the
wall time, the CPU time (user + system, what a loaded machine does not inflate) and the peak resident memory
of that process, best of --repeat by CPU time. The cases are the reproducers R03-R05 and the largest
configs and pattern lists the bounds allow.

Usage: python -m benchmarks.bench_validate_bounds [--repeat 3] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from fp8spec.catalog._parse import MAX_EXPERT_MODULES, MAX_LAYERS  # noqa: E402

BASE = """version: 1
name: base
model: {model}
hardware: {{gpu: h100, nodes: 1, gpus_per_node: 8, cuda: "12.9"}}
rollout: {{tp: 2}}
algorithm: {{train_batch_size: 32, ppo_mini_batch_size: 32}}
data: {{train_files: /data/train.parquet, val_files: /data/val.parquet}}
trainer: {{checkpoint_dir: /shared/checkpoints/base}}
"""
CATALOG = {
    "qwen8b": "{name: Qwen/Qwen3-8B-Base, path: /models/Qwen3-8B-Base}",
    "qwen30b": "{name: Qwen/Qwen3-30B-A3B-Base, path: /models/Qwen3-30B-A3B-Base}",
    "dsv3": "{name: deepseek-ai/DeepSeek-V3, path: /models/DeepSeek-V3}",
}
LOCAL = "{name: local/m, config_path: config.json, path: /models/m}"


def qwen_moe(layers: int, experts: int) -> dict:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_experts": experts,
        "num_experts_per_tok": min(8, experts),
        "num_hidden_layers": layers,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
    }


def deepseek_mla(layers: int, experts: int) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_routed_experts": experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": min(8, experts),
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "num_hidden_layers": layers,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "num_nextn_predict_layers": 1,
    }


def exclude(patterns: list[str]) -> str:
    return "linear:\n  exclude:\n" + "".join(f"    - {json.dumps(p)}\n" for p in patterns)


def cases() -> dict[str, tuple[str, dict | None]]:
    """name -> (spec text, config.json or None)."""
    biggest = MAX_EXPERT_MODULES // 512  # layers of a 512-expert model at the bound
    deep_experts = MAX_EXPERT_MODULES // (MAX_LAYERS + 1)  # the bound counts DeepSeek's MTP layer too
    digit_globs = [f"model.layers.{i}.*" for i in range(64)]
    return {
        "example qwen3-8b": (BASE.format(model=CATALOG["qwen8b"]), None),
        "R03 200 globs, DeepSeek-V3": (
            BASE.format(model=CATALOG["dsv3"]) + exclude([f"*.x{i}" for i in range(200)]),
            None,
        ),
        "R04 glob **********X": (BASE.format(model=CATALOG["qwen8b"]) + exclude(["**********X"]), None),
        "R04 re:(\\w+\\.?)+\\.gate, Qwen3-30B-A3B": (
            BASE.format(model=CATALOG["qwen30b"]) + exclude([r"re:(\w+\.?)+\.gate"]),
            None,
        ),
        "re:(.*)(.*)(.*)(.*)(.*)X, DeepSeek-V3": (
            BASE.format(model=CATALOG["dsv3"]) + exclude(["re:(.*)(.*)(.*)(.*)(.*)X"]),
            None,
        ),
        "64 layer globs, DeepSeek-V3": (BASE.format(model=CATALOG["dsv3"]) + exclude(digit_globs), None),
        "200 '*1*' globs, DeepSeek-V3 (past the step bound)": (
            BASE.format(model=CATALOG["dsv3"]) + exclude(["*1*"] * 200),
            None,
        ),
        "R05 4096 layers x 488 experts (refused)": (BASE.format(model=LOCAL), qwen_moe(4096, 488)),
        f"Qwen3-MoE {biggest} layers x 512 experts (bound)": (BASE.format(model=LOCAL), qwen_moe(biggest, 512)),
        f"Qwen3-MoE 4096 layers x {deep_experts} experts (bound)": (
            BASE.format(model=LOCAL),
            qwen_moe(MAX_LAYERS, deep_experts),
        ),
        f"DeepSeek MLA 4096 layers x {deep_experts} experts (bound)": (
            BASE.format(model=LOCAL),
            deepseek_mla(MAX_LAYERS, deep_experts),
        ),
        f"Qwen3-MoE {biggest} x 512 + 64 layer globs": (
            BASE.format(model=LOCAL) + exclude(digit_globs),
            qwen_moe(biggest, 512),
        ),
    }


def run(folder: Path) -> dict:
    cmd = [sys.executable, "-m", "fp8spec.cli", "validate", str(folder / "spec.yaml")]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    last = out.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    return {
        "exit": proc.returncode,
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "last_line": last[0][:160],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {}
    for name, (spec, config) in cases().items():
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "spec.yaml").write_text(spec)
            if config is not None:
                (folder / "config.json").write_text(json.dumps(config))
            runs = [run(folder) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["cpu_s"])
        results[name] = best
        print(
            f"{name:<55} exit {best['exit']}  cpu {best['cpu_s']:5.2f} s  wall {best['wall_s']:5.2f} s  "
            f"rss {best['max_rss_mb']:6.1f} MB  | {best['last_line'][:70]}",
            flush=True,
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
