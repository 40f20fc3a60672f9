"""Qwen3-30B-A3B and Qwen3-8B stacks in Megatron-Core + TransformerEngine, trained on RL-shaped packed micro-batches,
per training precision layout: forward + backward tokens/s and peak memory, every case in one process.

    python benchmarks/megatron/bench_te_layout.py --out DIR [--models qwen3-30b-a3b,qwen3-8b] [--layers 4]
        [--batches packed,single] [--layouts bf16,fp8,...] [--reps 5] [--budget-s 420]
    python benchmarks/megatron/bench_te_layout.py --plan      # the batches and layouts only (no GPU, no TE)

What it builds. A GPTModel of --layers decoder layers with Megatron's TE layer spec (MoE: 128 experts top-8,
grouped GEMM, alltoall dispatcher, as mbridge 0.15.1 builds Qwen3-MoE; cuDNN fused attention), shapes read from
fp8spec's model catalog, vocabulary 1024 (the embedding and output layer are negligible), wrapped in
Float16Module as Megatron's training loop does. One model per layout (LAYOUTS below; LAYOUTS.md beside this file
says which megatron-core / TE mechanism realises each one, with the source lines).

What it feeds. ``packed``: micro-batches in verl's THD format (``PackedSeqParams(qkv_format='thd')``, the
``cu_seqlens`` of ``verl/models/mcore/util.py:preprocess_packed_seqs``, each sequence padded to 16 tokens and the
pack to 128 as verl does for FP8), cut from one RL mini-batch (--mini-batch-seqs sequences of prompt + response
lengths drawn from clipped log-normals with a fixed seed, 1-8K tokens each) the way verl's dynamic batching does
(as many micro-batches as ``ceil(tokens / max_token_len)``, balanced by tokens). ``single``: one 22,528-token
sequence per micro-batch (docs/results.md#trainer-layer-cost). One timed step = --micro-batches micro-batches, forward +
backward each, with ``set_is_first_microbatch()`` before the first (TE quantizes the weights once per step, as in
Megatron's schedule); no optimizer step (its cost does not depend on the layout: fp8_param is off).

How it times. All layouts of one model are built first; a warm-up step per case; then --reps repetitions, each
running every case once in an interleaved order that is rotated (and reversed on odd repetitions) from one
repetition to the next; CUDA events around each step. Reported per case: median and min-max of tokens/s over the
repetitions (real tokens, not padding), the ratio to BF16 (per repetition against the BF16 run of the same
repetition: median and min-max), peak memory (``max_memory_allocated`` over the step, less the other resident
models), and which TE modules ran FP8 (each TE module's ``fp8`` flag after its last forward). --budget-s bounds
the timed part: past it, no repetition beyond --min-reps starts. Results: DIR/layout_results.json and
DIR/layout_table.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import json
import math
import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CATALOG = REPO / "fp8spec" / "catalog" / "models"
CATALOG_FILES = {"qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B.yaml", "qwen3-8b": "Qwen--Qwen3-8B.yaml"}

# Module classes of a Megatron GPTModel with the TE spec, as glob patterns over GPTModel.named_modules() names:
# what megatron-core's per-module quantization config (TransformerConfig.quant_recipe) matches against.
MODULE_CLASSES = {
    "attention": ("*.self_attention.linear_qkv", "*.self_attention.linear_proj"),
    "dense_mlp": ("*.mlp.linear_fc1", "*.mlp.linear_fc2"),
    "experts": ("*.mlp.experts.linear_fc1", "*.mlp.experts.linear_fc2"),
    "shared_experts": ("*.mlp.shared_experts.linear_fc1", "*.mlp.shared_experts.linear_fc2"),
}


@dataclass(frozen=True)
class Layout:
    """One training precision layout and the mechanism that realises it."""

    name: str
    recipe: str | None  # TransformerConfig.fp8_recipe with fp8='hybrid'; None: no FP8 at all
    bf16_classes: tuple[str, ...] = ()  # module classes kept BF16 through TransformerConfig.quant_recipe
    bf16_edge_layers: int = 0  # layers at each end kept BF16 (first_last_layers_bf16)
    op_fuser: bool = False  # experts through TE's op fuser (use_transformer_engine_op_fuser)
    experts_autocast_off: bool = (
        False  # experts' forward wrapped in te.autocast(enabled=False) (a runtime patch)
    )
    models: str = "all"  # "moe": only for MoE models, "dense": only for dense ones
    mechanism: str = ""


LAYOUTS = [
    Layout("bf16", None, mechanism="no fp8 in TransformerConfig"),
    Layout(
        "fp8", "blockwise", mechanism="fp8='hybrid', fp8_recipe='blockwise' (the recipe the bundles compile)"
    ),
    Layout(
        "fp8-experts-bf16",
        "blockwise",
        bf16_classes=("experts",),
        models="moe",
        mechanism="fp8 blockwise + quant_recipe: experts' linear_fc1/fc2 -> TEQuantizationParams with no fp8 "
        "recipe (autocast(enabled=False) inside TEGroupedLinear.forward)",
    ),
    Layout(
        "fp8-mlp-bf16",
        "blockwise",
        bf16_classes=("dense_mlp",),
        models="dense",
        mechanism="fp8 blockwise + quant_recipe: mlp.linear_fc1/fc2 -> BF16",
    ),
    Layout(
        "fp8-attn-bf16",
        "blockwise",
        bf16_classes=("attention",),
        mechanism="fp8 blockwise + quant_recipe: self_attention.linear_qkv/linear_proj -> BF16 (core attention "
        "is BF16 in every layout: fp8_dot_product_attention off)",
    ),
    Layout(
        "fp8-firstlast-bf16",
        "blockwise",
        bf16_edge_layers=1,
        mechanism="fp8 blockwise + first_last_layers_bf16 (1 + 1 layers): TransformerBlock enters no fp8 "
        "autocast for those layers",
    ),
    Layout(
        "fp8-tensorwise", "tensorwise", mechanism="fp8='hybrid', fp8_recipe='tensorwise' (current scaling)"
    ),
    Layout(
        "bf16-fp8pad",
        "blockwise",
        bf16_classes=("attention", "dense_mlp", "experts", "shared_experts"),
        models="moe",
        mechanism="control: the fp8 config (so TEGroupedMLP pads each expert's tokens to 16) with every TE module "
        "BF16 through quant_recipe: BF16 compute, the FP8 layouts' expert padding",
    ),
    Layout(
        "bf16-opfuser",
        None,
        op_fuser=True,
        models="moe",
        mechanism="BF16 + use_transformer_engine_op_fuser: experts as TE ops (GroupedLinear + ScaledSwiGLU + "
        "GroupedLinear), the grouped-tensor GEMM where cuBLASLt allows it",
    ),
    Layout(
        "fp8-opfuser",
        "blockwise",
        op_fuser=True,
        models="moe",
        mechanism="fp8 blockwise + use_transformer_engine_op_fuser (experts padded to 256 tokens)",
    ),
    Layout(
        "fp8-tensorwise-opfuser",
        "tensorwise",
        op_fuser=True,
        models="moe",
        mechanism="fp8 tensorwise + use_transformer_engine_op_fuser",
    ),
    Layout(
        "fp8-experts-bf16-opfuser",
        "blockwise",
        op_fuser=True,
        experts_autocast_off=True,
        models="moe",
        mechanism="fp8 blockwise + op fuser, experts' TEGroupedMLP.forward wrapped in te.autocast(enabled=False) "
        "(runtime patch: quant_recipe does not reach the fused ops)",
    ),
]
LAYOUT_BY_NAME = {lay.name: lay for lay in LAYOUTS}


def model_shape(model: str) -> dict:
    """The layer shape of a catalog model (its config.json, transcribed in fp8spec/catalog/models)."""
    import yaml  # pyyaml: in the project's environment and in the H200 image

    cfg = yaml.safe_load((CATALOG / CATALOG_FILES[model]).read_text(encoding="utf-8"))["config"]
    experts = int(cfg.get("num_experts", 0) or 0)
    return {
        "hidden": cfg["hidden_size"],
        "heads": cfg["num_attention_heads"],
        "kv_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["head_dim"],
        "ffn": cfg["intermediate_size"],
        "experts": experts,
        "topk": int(cfg.get("num_experts_per_tok", 0) or 0) if experts else 0,
        "moe_ffn": int(cfg.get("moe_intermediate_size", 0) or 0) if experts else 0,
        "rope_theta": cfg["rope_theta"],
        "model_layers": cfg["num_hidden_layers"],
    }


def layouts_for(model_is_moe: bool, names: list[str] | None = None) -> list[Layout]:
    chosen = [LAYOUT_BY_NAME[n] for n in names] if names else LAYOUTS
    want = "moe" if model_is_moe else "dense"
    return [lay for lay in chosen if lay.models in ("all", want)]


def quant_recipe_dict(bf16_classes: tuple[str, ...]) -> dict | None:
    """megatron-core's per-module quantization config (quantization/quant_config.py RecipeConfig.from_config_dict):
    every module of the given classes matched by a glob to a TEQuantizationParams whose training recipe names no
    FP8 recipe, which TELinear / TELayerNormColumnParallelLinear / TEGroupedLinear run as
    ``fp8_autocast(enabled=False)``. Modules no matcher matches keep the model-wide recipe."""
    if not bf16_classes:
        return None
    matchers = {}
    for cls in bf16_classes:
        for i, pattern in enumerate(MODULE_CLASSES[cls]):
            matchers[f"{cls}_{i}"] = {"type": "glob", "pattern": pattern, "config": "bf16", "enabled": True}
    return {
        "configs": {
            "bf16": {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": {}}
        },
        "matchers": matchers,
    }


def module_class(name: str) -> str | None:
    """The module class (MODULE_CLASSES key) of a GPTModel module name, or None."""
    for cls in ("experts", "shared_experts", "attention", "dense_mlp"):  # experts before dense_mlp: '*.mlp.*'
        if any(fnmatch.fnmatchcase(name, p) for p in MODULE_CLASSES[cls]):
            return cls
    return None


# ---------------------------------------------------------------------------------------------------------------
# RL-shaped batches


def sample_rl_lengths(n: int, seed: int) -> list[tuple[int, int]]:
    """(prompt, response) token counts of n RL rollouts: clipped log-normals (prompt median 512, response median
    2,560), each sequence 1,024-8,192 tokens in all. Deterministic for a seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = int(min(max(rng.lognormvariate(math.log(512), 0.6), 128), 2048))
        response = int(min(max(rng.lognormvariate(math.log(2560), 0.7), 256), 8192 - prompt))
        response = max(response, 1024 - prompt)
        out.append((prompt, response))
    return out


def balanced_micro_batches(lengths: list[int], max_token_len: int) -> list[list[int]]:
    """verl's dynamic batching (utils/seqlen_balancing.py rearrange_micro_batches): ceil(total / max_token_len)
    micro-batches, balanced by tokens (largest first onto the lightest; verl uses Karmarkar-Karp), more if one
    would exceed max_token_len. Returns indices into lengths, each micro-batch in index order."""
    if max(lengths) > max_token_len:
        raise ValueError(f"a sequence of {max(lengths)} tokens exceeds max_token_len {max_token_len}")
    k = min(len(lengths), -(-sum(lengths) // max_token_len))
    while True:
        parts: list[list[int]] = [[] for _ in range(k)]
        sums = [0] * k
        for i in sorted(range(len(lengths)), key=lambda j: (-lengths[j], j)):
            p = min(range(k), key=lambda q: (sums[q], q))
            parts[p].append(i)
            sums[p] += lengths[i]
        if max(sums) <= max_token_len:
            return [sorted(p) for p in parts]
        k += 1


def thd_layout(seqlens: list[int], seq_align: int = 16, total_align: int = 128) -> dict:
    """verl's preprocess_packed_seqs with FP8 padding (TP = CP = 1): each sequence padded to seq_align tokens,
    the last one further so the pack is a multiple of total_align. cu_seqlens over the padded lengths (verl passes
    the padded offsets as cu_seqlens_q/kv and *_padded alike), max_seqlen the longest padded sequence."""
    padded = [n + (-n % seq_align) for n in seqlens]
    padded[-1] += -sum(padded) % total_align
    cu = [0]
    for n in padded:
        cu.append(cu[-1] + n)
    return {
        "seqlens": list(seqlens),
        "padded": padded,
        "cu_seqlens": cu,
        "max_seqlen": max(padded),
        "total": cu[-1],
        "tokens": sum(seqlens),
    }


def plan_batches(
    seed: int, mini_batch_seqs: int, max_token_len: int, micro_batches: int, single_len: int
) -> dict:
    pairs = sample_rl_lengths(mini_batch_seqs, seed)
    lengths = [p + r for p, r in pairs]
    parts = balanced_micro_batches(lengths, max_token_len)
    packed = [thd_layout([lengths[i] for i in part]) for part in parts[:micro_batches]]
    return {
        "seed": seed,
        "mini_batch": [list(p) for p in pairs],
        "max_token_len": max_token_len,
        "all_micro_batch_tokens": [sum(lengths[i] for i in part) for part in parts],
        "packed": packed,
        "single": [{"seqlens": [single_len], "tokens": single_len, "total": single_len}] * micro_batches,
    }


def rotated_order(cases: list, rep: int) -> list:
    """The order of repetition rep: rotated by rep * stride (stride = len / 3, at least 1), reversed when rep is odd,
    so that no case always follows the same one."""
    if not cases:
        return []
    stride = max(1, len(cases) // 3)
    k = (rep * stride) % len(cases)
    order = cases[k:] + cases[:k]
    return order[::-1] if rep % 2 else order


def summarize(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


# ---------------------------------------------------------------------------------------------------------------
# GPU part


def _require_stack() -> str | None:
    """None when TransformerEngine's PyTorch extension and megatron-core import, else why not."""
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device"
        import megatron.core  # noqa: F401
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # ImportError, or TE's own error when its torch extension is missing
        return f"{type(exc).__name__}: {exc}"
    return None


def build_model(model: str, shape: dict, layout: Layout, layers: int, max_seq: int):
    import torch
    from megatron.core.quantization.quant_config import RecipeConfig
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    from benchmarks.megatron.bench_te_layer import config_kwargs, gpt_model

    moe = shape["experts"] > 0
    kw = config_kwargs(shape, num_layers=layers)
    # mbridge 0.15.1 (models/qwen3moe.py, core/llm_bridge.py) adds these for the Qwen3 bridges
    kw.update(bias_activation_fusion=True, bias_dropout_fusion=True, masked_softmax_fusion=True)
    if moe:
        kw.update(moe_router_score_function="softmax", moe_router_pre_softmax=False)
    if layout.recipe:
        kw.update(fp8="hybrid", fp8_recipe=layout.recipe)
    if layout.bf16_edge_layers:
        kw.update(
            first_last_layers_bf16=True,
            num_layers_at_start_in_bf16=layout.bf16_edge_layers,
            num_layers_at_end_in_bf16=layout.bf16_edge_layers,
        )
    recipe = quant_recipe_dict(layout.bf16_classes)
    if recipe:
        kw["quant_recipe"] = RecipeConfig.from_config_dict(recipe)
    if layout.op_fuser:
        kw["use_transformer_engine_op_fuser"] = True
    config = TransformerConfig(**kw)
    gpt = gpt_model(config, shape, max_seq, rotary_base=int(shape["rope_theta"]))
    if layout.experts_autocast_off:
        _experts_autocast_off(gpt)
    net = Float16Module(config, gpt.cuda())
    net.train()
    return net, torch


def _experts_autocast_off(gpt) -> None:
    """Wrap every TEGroupedMLP's forward in TE's autocast(enabled=False): the experts run BF16 inside an FP8 model
    (TE restores the outer state on exit, quantization.py autocast_enter / autocast_exit)."""
    import transformer_engine.pytorch as te
    from megatron.core.transformer.moe.experts import TEGroupedMLP

    for module in gpt.modules():
        if isinstance(module, TEGroupedMLP):
            inner = module.forward

            def forward(*args, _inner=inner, **kwargs):
                with te.autocast(enabled=False):
                    return _inner(*args, **kwargs)

            module.forward = forward


def make_inputs(batch: dict, kind: str, torch):
    from megatron.core.packed_seq_params import PackedSeqParams

    total = batch["total"]
    ids = torch.randint(0, 1024, (1, total), device="cuda")
    if kind == "single":
        return {
            "input_ids": ids,
            "position_ids": torch.arange(total, device="cuda").unsqueeze(0),
            "attention_mask": None,
        }
    pos = torch.cat([torch.arange(n, device="cuda") for n in batch["padded"]]).unsqueeze(0)
    cu = torch.tensor(batch["cu_seqlens"], dtype=torch.int32, device="cuda")
    psp = PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        cu_seqlens_q_padded=cu,
        cu_seqlens_kv_padded=cu,
        max_seqlen_q=batch["max_seqlen"],
        max_seqlen_kv=batch["max_seqlen"],
    )
    return {"input_ids": ids, "position_ids": pos, "attention_mask": None, "packed_seq_params": psp}


class Case:
    def __init__(
        self,
        model: str,
        kind: str,
        layout: Layout,
        net=None,
        inputs=None,
        tokens: int = 0,
        torch=None,
        grad_cache: dict | None = None,
        error: str | None = None,
    ):
        self.model, self.kind, self.layout, self.net, self.inputs, self.tokens = (
            model,
            kind,
            layout,
            net,
            inputs,
            tokens,
        )
        self.torch, self.grad_cache = torch, grad_cache
        self.param_bytes = (
            sum(p.numel() * p.element_size() for p in net.parameters()) if net is not None else 0
        )
        self.tok_s: list[float] = []
        self.peak_gib: list[float] = []
        self.error = error
        self.fp8: dict = {}
        self.profile: dict | None = None

    @property
    def key(self) -> str:
        return f"{self.model}/{self.kind}/{self.layout.name}"

    def step(self) -> float:
        """One step: set_is_first_microbatch, then forward + backward of each micro-batch. Returns ms."""
        torch = self.torch
        self.net.set_is_first_microbatch()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for x in self.inputs:
            out = self.net(**x)
            grad = self.grad_cache.get(
                tuple(out.shape)
            )  # one random output gradient per shape, for all cases
            if grad is None:
                grad = self.grad_cache[tuple(out.shape)] = torch.randn_like(out) * 1e-3
            out.backward(grad)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    def release(self) -> None:
        """What a step leaves behind that the next case must not count: gradients, TE's FP8 weight workspaces."""
        for p in self.net.parameters():
            p.grad = None
        for m in self.net.modules():
            ws = getattr(m, "_fp8_workspaces", None)
            if isinstance(ws, dict):
                ws.clear()

    def run(self, timed: bool) -> None:
        torch = self.torch
        if self.error:
            return
        try:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            ms = self.step()
            peak = torch.cuda.max_memory_allocated() - base + self.param_bytes
            if timed:
                self.tok_s.append(self.tokens / ms * 1000.0)
                self.peak_gib.append(peak / 2**30)
        except Exception as exc:  # one failing layout must not hide the others
            self.error = f"{type(exc).__name__}: {str(exc)[:600]}"
            print(f"{self.key}: {self.error}", flush=True)
        finally:
            self.release()

    def fp8_report(self) -> dict:
        """Per module class: how many TE modules ran FP8 in their last forward (TE's module.fp8 flag)."""
        report: dict[str, list[int]] = {}
        gpt = self.net.module
        for name, m in gpt.named_modules():
            cls = module_class(name)
            if cls is None or not hasattr(m, "fp8") or (cls == "experts" and self.layout.op_fuser):
                continue  # with the op fuser the experts' TE modules never run their own forward
            ran = report.setdefault(cls, [0, 0])
            ran[0] += bool(m.fp8)
            ran[1] += 1
        if self.layout.op_fuser:
            report["experts_note"] = (
                "TE op fuser: BF16 under te.autocast(enabled=False)"
                if self.layout.experts_autocast_off or not self.layout.recipe
                else f"TE op fuser: FP8 {self.layout.recipe} (the model's autocast)"
            )
        return report


KERNEL_GROUPS = (  # first match wins, on the lower-cased kernel name
    ("attention", ("fmha", "flash", "cudnn", "attn", "sdpa")),
    ("fp8 quantize / transpose", ("quantiz", "cast", "transpose", "amax", "fp8", "block_scal", "scale")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "wgmma", "sm90")),
    (
        "moe permute / pad / sort",
        ("permut", "sort", "pad", "moe", "index", "scatter", "gather", "topk", "histc"),
    ),
    ("norm / activation / rope", ("norm", "swiglu", "silu", "glu", "rope", "rotary", "softmax")),
)


def kernel_group(name: str) -> str:
    low = name.lower()
    for group, keys in KERNEL_GROUPS:
        if any(k in low for k in keys):
            return group
    return "other (elementwise, copies, reductions)"


def profile_case(case: Case) -> dict:
    """One step of a case under torch.profiler (CUDA activity only): CUDA time per kernel group and the top
    kernels, in ms per step. Where the time goes when a layout does not pay."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            case.run(timed=False)
        kernels: dict[str, float] = {}
        for e in prof.key_averages():
            us = getattr(e, "self_device_time_total", None)
            if us is None:
                us = getattr(e, "self_cuda_time_total", 0)
            if us > 0:
                kernels[e.key] = kernels.get(e.key, 0.0) + us / 1000.0
        groups: dict[str, float] = {}
        for name, ms in kernels.items():
            groups[kernel_group(name)] = groups.get(kernel_group(name), 0.0) + ms
        top = sorted(kernels.items(), key=lambda kv: -kv[1])[:25]
        return {
            "groups_ms": {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "total_ms": round(sum(kernels.values()), 2),
            "top_kernels_ms": [[name[:140], round(ms, 2)] for name, ms in top],
        }
    except Exception as exc:  # informational: the timings stand without it
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def environment(torch) -> dict:
    import transformer_engine.pytorch as te

    from benchmarks.megatron.bench_te_layer import stack_versions

    env = {
        **stack_versions(),
        "NVTE_FP8_BLOCK_SCALING_FP32_SCALES": os.environ.get("NVTE_FP8_BLOCK_SCALING_FP32_SCALES"),
        "NVTE_USE_CUTLASS_GROUPED_GEMM": os.environ.get("NVTE_USE_CUTLASS_GROUPED_GEMM"),
    }
    try:
        import transformer_engine_torch as tex

        env["cublaslt"] = tex.get_cublasLt_version()
        from transformer_engine.common.recipe import Float8BlockScaling, Float8CurrentScaling
        from transformer_engine.pytorch.ops.basic.grouped_linear import (
            is_op_fuser_grouped_tensor_path_supported,
        )

        env["op_fuser_grouped_tensor_path"] = {
            name: is_op_fuser_grouped_tensor_path_supported(r, torch.bfloat16)
            for name, r in (
                ("bf16", None),
                ("blockwise", Float8BlockScaling()),
                ("tensorwise", Float8CurrentScaling()),
            )
        }
    except Exception as exc:  # informational only
        env["cublaslt_error"] = f"{type(exc).__name__}: {exc}"
    env["fp8_block_scaling_available"] = bool(te.is_fp8_block_scaling_available())
    return env


def run_model(model: str, args, plan: dict, deadline: float, log) -> list[Case]:
    import torch

    shape = model_shape(model)
    moe = shape["experts"] > 0
    cases: list[Case] = []
    grad_cache: dict = {}
    for layout in layouts_for(moe, args.layouts):
        t0 = time.time()
        try:
            net, _ = build_model(
                model, shape, layout, args.layers, max(args.single_len, args.max_token_len) + 128
            )
        except Exception as exc:
            log(f"{model}/{layout.name}: build failed: {type(exc).__name__}: {str(exc)[:600]}")
            cases += [
                Case(model, kind, layout, error=f"build: {type(exc).__name__}: {str(exc)[:600]}")
                for kind in args.batches
            ]
            continue
        for kind in args.batches:
            batches = plan[kind]
            inputs = [make_inputs(b, kind, torch) for b in batches]
            cases.append(
                Case(model, kind, layout, net, inputs, sum(b["tokens"] for b in batches), torch, grad_cache)
            )
        net = None
        log(
            f"{model}/{layout.name}: built in {time.time() - t0:.1f} s, "
            f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated"
        )
    live = [c for c in cases if c.net is not None]
    t0 = time.time()
    # warm-up: one step per case (cuDNN plans, TE kernels, the first quantization)
    for c in rotated_order(live, 0):
        c.run(timed=False)
    log(f"{model}: warm-up of {len(live)} cases in {time.time() - t0:.1f} s")
    for rep in range(args.reps):
        if rep >= args.min_reps and time.time() > deadline:
            log(f"{model}: budget reached after {rep} repetitions")
            break
        t0 = time.time()
        for c in rotated_order(live, rep):
            c.run(timed=True)
        log(f"{model}: repetition {rep + 1} in {time.time() - t0:.1f} s")
    for c in live:
        if c.kind == "packed" and c.layout.name in (args.profile or []) and not c.error:
            c.profile = profile_case(c)
            log(f"{c.key}: CUDA time by kernel group (ms per step) {c.profile.get('groups_ms', c.profile)}")
    for c in live:
        c.fp8 = c.fp8_report() if not c.error else {}
        c.net, c.inputs = None, None
    grad_cache.clear()
    gc.collect()
    torch.cuda.empty_cache()
    return cases


def case_rows(cases: list[Case]) -> list[dict]:
    rows = []
    base = {(c.model, c.kind): c for c in cases if c.layout.name == "bf16" and c.tok_s}
    for c in cases:
        row = {"model": c.model, "batch": c.kind, "layout": c.layout.name, "error": c.error}
        if c.profile:
            row["profile"] = c.profile
        if c.tok_s:
            row.update(
                tok_s=[round(v, 1) for v in c.tok_s],
                tok_s_summary=summarize(c.tok_s),
                peak_gib=round(max(c.peak_gib), 2),
                fp8_modules=getattr(c, "fp8", {}),
            )
            b = base.get((c.model, c.kind))
            if b is not None and len(b.tok_s) == len(c.tok_s):
                row["vs_bf16"] = summarize([v / w for v, w in zip(c.tok_s, b.tok_s)])
        rows.append(row)
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| model | batch | layout | tok/s median | tok/s min-max | vs BF16 median (min-max) | peak GiB | "
        "FP8 modules (ran / TE modules) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "tok_s_summary" not in r:
            lines.append(
                f"| {r['model']} | {r['batch']} | {r['layout']} | error | | | | {r['error'][:120]} |"
            )
            continue
        s, v = r["tok_s_summary"], r.get("vs_bf16")
        ratio = f"{v['median']:.2f}x ({v['min']:.2f}-{v['max']:.2f})" if v else ""
        mods = r["fp8_modules"]
        fp8 = ", ".join(f"{k} {x[0]}/{x[1]}" for k, x in mods.items() if isinstance(x, list))
        if "experts_note" in mods:
            fp8 += f"; experts: {mods['experts_note']}"
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['layout']} | {s['median']:,.0f} | "
            f"{s['min']:,.0f}-{s['max']:,.0f} | {ratio} | {r['peak_gib']:.1f} | {fp8} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--models", default="qwen3-30b-a3b,qwen3-8b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batches", default="packed,single")
    ap.add_argument("--layouts", default="", help="comma list of layout names (default: all that apply)")
    ap.add_argument("--micro-batches", type=int, default=4, help="micro-batches per timed step")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="no repetition past --min-reps starts after this"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mini-batch-seqs", type=int, default=64)
    ap.add_argument("--max-token-len", type=int, default=22528, help="verl's ppo_max_token_len_per_gpu")
    ap.add_argument("--single-len", type=int, default=22528)
    ap.add_argument(
        "--profile",
        default="",
        help="comma list of layouts whose packed step is profiled once (kernel groups)",
    )
    ap.add_argument(
        "--plan", action="store_true", help="print the batches and layouts as JSON and stop (no GPU)"
    )
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.batches = [b for b in args.batches.split(",") if b]
    args.layouts = [x for x in args.layouts.split(",") if x] or None
    args.profile = [x for x in args.profile.split(",") if x]
    unknown = [m for m in args.models if m not in CATALOG_FILES] + [
        b for b in args.batches if b not in ("packed", "single")
    ]
    unknown += [x for x in (args.layouts or []) + args.profile if x not in LAYOUT_BY_NAME]
    if unknown:
        ap.error(f"unknown model, batch or layout: {', '.join(unknown)}")
    plan = plan_batches(
        args.seed, args.mini_batch_seqs, args.max_token_len, args.micro_batches, args.single_len
    )
    if args.plan:
        print(
            json.dumps(
                {
                    "batches": plan,
                    "layouts": [asdict(x) for x in LAYOUTS],
                    "quant_recipes": {x.name: quant_recipe_dict(x.bf16_classes) for x in LAYOUTS},
                },
                indent=1,
            )
        )
        return 0
    if args.out is None:
        ap.error("--out is required (or --plan)")
    os.environ.setdefault("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "1")  # as the FP8 bundles set it
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # before the first CUDA call, as Megatron wants
    why = _require_stack()
    if why:
        print(
            f"bench_te_layout: needs a CUDA GPU with TransformerEngine's PyTorch extension and megatron-core "
            f"({why}); see benchmarks/megatron/README.md",
            file=sys.stderr,
        )
        return 2
    import torch

    from benchmarks.megatron.bench_te_layer import init_dist

    args.out.mkdir(parents=True, exist_ok=True)
    log_file = open(args.out / "layout.log", "a", encoding="utf-8")

    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    init_dist()
    env = environment(torch)
    log(json.dumps(env))
    packed = plan["packed"]
    log(
        f"packed micro-batches: tokens {[b['tokens'] for b in packed]}, sequences {[len(b['seqlens']) for b in packed]}, "
        f"max_seqlen {[b['max_seqlen'] for b in packed]}"
    )
    start = time.time()
    deadline = start + args.budget_s
    cases: list[Case] = []
    table = ""
    for i, model in enumerate(args.models):
        # the timed budget is shared: each model gets its share of what is left
        share = (deadline - time.time()) / (len(args.models) - i)
        cases += run_model(model, args, plan, time.time() + share, log)
        rows = case_rows(cases)  # written after each model: a call cut short keeps the models done
        result = {
            "env": env,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "batches": plan,
            "layouts": [asdict(x) for x in LAYOUTS],
            "rows": rows,
            "wall_s": round(time.time() - start, 1),
        }
        (args.out / "layout_results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        table = markdown_table(rows)
        (args.out / "layout_table.md").write_text(table, encoding="utf-8")
    print(table, flush=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
