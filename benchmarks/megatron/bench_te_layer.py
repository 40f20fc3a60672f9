"""One decoder layer of Qwen3-30B-A3B and of Qwen3-8B in Megatron-Core + TransformerEngine on one GPU:
forward + backward in BF16 against TE FP8 (blockwise, as the FP8-RL recipe, and current scaling), tokens/s.

    python benchmarks/megatron/bench_te_layer.py --out DIR [--models qwen3-30b-a3b,qwen3-8b]
        [--seqlens 4096,22528] [--precisions bf16,fp8-blockwise,fp8-tensorwise] [--iters 10]

Each case builds a one-layer GPTModel with Megatron's own TransformerEngine layer spec (grouped-GEMM experts and
the alltoall dispatcher for the MoE, cuDNN fused attention: the H200 image has no flash-attn), vocabulary 1024 so
the embedding and output layer are negligible, wrapped in Float16Module as Megatron's training loop does. The FP8
cases set the TransformerConfig fields the fp8spec Megatron bundles set (fp8='hybrid', fp8_recipe=...) and
NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1, so TransformerBlock enters TE's autocast exactly as in training. One packed
sequence of --seqlens tokens per micro-batch (the example specs' ppo_max_token_len_per_gpu is 22528), no
tensor/expert parallelism: a per-GPU layer cost, not a multi-GPU step. Timed with CUDA events over --iters
iterations after 3 warm-ups; results as JSON lines in DIR/results.jsonl and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

# Megatron/TE read these at import or first use; set them before importing either.
os.environ.setdefault("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "1")
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CATALOG = Path(__file__).resolve().parents[2] / "fp8spec" / "catalog" / "models"
# Shapes from the catalog's config.json of each model (Qwen/Qwen3-30B-A3B, Qwen/Qwen3-8B).
SHAPES = {
    "qwen3-30b-a3b": {
        "hidden": 2048,
        "heads": 32,
        "kv_heads": 4,
        "head_dim": 128,
        "ffn": 6144,
        "experts": 128,
        "topk": 8,
        "moe_ffn": 768,
    },
    "qwen3-8b": {
        "hidden": 4096,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "ffn": 12288,
        "experts": 0,
        "topk": 0,
        "moe_ffn": 0,
    },
}
RECIPES = {
    "bf16": None,
    "fp8-blockwise": "blockwise",
    "fp8-tensorwise": "tensorwise",
    "fp8-delayed": "delayed",
}


def init_dist() -> None:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(0)


def config_kwargs(s: dict, num_layers: int) -> dict:
    """The BF16 TransformerConfig fields of a shape from SHAPES (bench_te_layout.py builds on them)."""
    from megatron.core.transformer.enums import AttnBackend

    kw = {
        "num_layers": num_layers,
        "hidden_size": s["hidden"],
        "ffn_hidden_size": s["ffn"],
        "num_attention_heads": s["heads"],
        "num_query_groups": s["kv_heads"],
        "kv_channels": s["head_dim"],
        "normalization": "RMSNorm",
        "layernorm_epsilon": 1e-6,
        "qk_layernorm": True,
        "gated_linear_unit": True,
        "activation_func": F.silu,
        "add_bias_linear": False,
        "add_qkv_bias": False,
        "bf16": True,
        "params_dtype": torch.bfloat16,
        "attention_backend": AttnBackend.fused,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }
    if s["experts"] > 0:
        kw.update(
            num_moe_experts=s["experts"],
            moe_router_topk=s["topk"],
            moe_ffn_hidden_size=s["moe_ffn"],
            moe_grouped_gemm=True,
            moe_token_dispatcher_type="alltoall",
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            variable_seq_lengths=True,
        )  # as verl builds it (alltoall dispatcher needed for that)
    return kw


def build(model: str, precision: str, seqlen: int):
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    s = SHAPES[model]
    recipe = RECIPES[precision]
    kw = config_kwargs(s, num_layers=1)
    if recipe:
        kw.update(fp8="hybrid", fp8_recipe=recipe)
    config = TransformerConfig(**kw)
    gpt = gpt_model(config, s, seqlen, rotary_base=1000000)
    return Float16Module(config, gpt.cuda()), config


def gpt_model(config, shape: dict, max_seq: int, rotary_base: int):
    """A GPTModel of ``config``'s layers with Megatron's own TransformerEngine layer spec (grouped-GEMM experts
    for a MoE shape) and a 1024-token vocabulary, so that the embedding and output layer cost next to nothing."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

    spec = get_gpt_layer_with_transformer_engine_spec(
        num_experts=shape["experts"] or None, moe_grouped_gemm=shape["experts"] > 0, qk_layernorm=True
    )
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=1024,
        max_sequence_length=max_seq,
        position_embedding_type="rope",
        rotary_base=rotary_base,
        pre_process=True,
        post_process=True,
    )


def stack_versions() -> dict:
    """The software and GPU a result was measured on, with the time."""
    import megatron.core
    import transformer_engine

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "transformer_engine": transformer_engine.__version__,
        "megatron_core": megatron.core.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def time_case(model: str, precision: str, seqlen: int, iters: int) -> dict:
    net, _ = build(model, precision, seqlen)
    ids = torch.randint(0, 1024, (1, seqlen), device="cuda")
    pos = torch.arange(seqlen, device="cuda").unsqueeze(0)
    grad = None

    def step() -> None:
        nonlocal grad
        out = net(ids, pos, attention_mask=None)
        if grad is None:
            grad = torch.randn_like(out) * 1e-3
        out.backward(grad)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / iters
    fp8_modules = sorted({type(m).__name__ for m in net.modules() if getattr(m, "fp8", False)})
    row = {
        "model": model,
        "precision": precision,
        "seqlen": seqlen,
        "ms_per_iter": round(ms, 3),
        "tokens_per_s": round(seqlen / ms * 1000.0, 1),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "te_fp8_modules": fp8_modules,
    }
    net = None  # the model's memory goes before the next case is built
    torch.cuda.empty_cache()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="qwen3-30b-a3b,qwen3-8b")
    ap.add_argument("--seqlens", default="4096,22528")
    ap.add_argument("--precisions", default="bf16,fp8-blockwise,fp8-tensorwise")
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    init_dist()
    env = stack_versions()
    print(json.dumps(env), flush=True)
    rows = []
    with open(a.out / "results.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"env": env}) + "\n")
        for model in a.models.split(","):
            for seqlen in map(int, a.seqlens.split(",")):
                base = None
                for precision in a.precisions.split(","):
                    try:
                        row = time_case(model, precision, seqlen, a.iters)
                    except Exception as exc:  # one failing recipe must not hide the others
                        row = {
                            "model": model,
                            "precision": precision,
                            "seqlen": seqlen,
                            "error": f"{type(exc).__name__}: {str(exc)[:400]}",
                        }
                        torch.cuda.empty_cache()
                    if precision == "bf16" and "tokens_per_s" in row:
                        base = row["tokens_per_s"]
                    if base and "tokens_per_s" in row:
                        row["vs_bf16"] = round(row["tokens_per_s"] / base, 3)
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(json.dumps(row), flush=True)
    print(
        f"{'model':<15}{'seqlen':>7}  {'precision':<16}{'ms/iter':>9}{'tok/s':>11}{'vs bf16':>9}{'peak GiB':>10}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<15}{r['seqlen']:>7}  {r['precision']:<16} ERROR {r['error'][:80]}")
        else:
            print(
                f"{r['model']:<15}{r['seqlen']:>7}  {r['precision']:<16}{r['ms_per_iter']:>9.2f}"
                f"{r['tokens_per_s']:>11.0f}{r.get('vs_bf16', 1.0):>9.3f}{r['peak_mem_gib']:>10.2f}"
            )
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
