"""The rollout-shaped workload both engines' benches run: ``--prompts`` random-token prompts submitted at once
(as verl submits a step's ``train_batch_size x n`` sequences), temperature 1 with ``ignore_eos`` so every sequence
makes exactly ``--output-len`` tokens, after a 16-prompt warm-up."""

from __future__ import annotations

import argparse

from benchmarks.common.models import MODELS

VOCAB = 151936  # Qwen3's
MODES = ("bf16", "fp8", "fp8kv")
WARMUP_PROMPTS = 16


def add_arguments(ap: argparse.ArgumentParser, *, required: bool, max_model_len: int = 8192) -> None:
    ap.add_argument("--model", choices=sorted(MODELS), required=required)
    ap.add_argument("--mode", choices=MODES, required=required,
                    help="bf16, fp8 (W8A8 blockwise 128x128 as verl 0.9.1 configures it), fp8kv (fp8 + FP8 KV cache)")
    ap.add_argument("--deep-gemm", type=int, choices=[0, 1], default=0)
    ap.add_argument("--util", type=float, default=0.6, help="the engine's share of GPU memory")
    ap.add_argument("--max-model-len", type=int, default=max_model_len)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=1536)


def random_prompts(n: int, length: int) -> list[list[int]]:
    """``n`` prompts of ``length`` token ids, the same on every run (seed 0)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, VOCAB, (length,), generator=gen).tolist() for _ in range(n)]


def throughput(args: argparse.Namespace, out_tokens: int, gen_s: float) -> dict:
    return {"output_tokens": out_tokens, "output_tok_per_s": round(out_tokens / gen_s, 1),
            "total_tok_per_s": round((out_tokens + args.prompts * args.prompt_len) / gen_s, 1)}
