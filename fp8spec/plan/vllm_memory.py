"""KV memory the way vLLM 0.24 finds it at start-up (gpu_worker.determine_available_memory).

    requested    = ceil(total * gpu_memory_utilization)                         exact
    available_kv = requested - weights - activation_peak - non_torch - cudagraph_estimate

``weights`` is exact (tensor shapes). ``activation_peak`` models what the profiling run allocates: one
forward pass over max_num_batched_tokens tokens, then the sampler over min(max_num_batched_tokens,
max_num_seqs) rows, each peak read off vLLM's code (profile facts memory.profile_run,
memory.profile_sampler_bytes_per_logit, memory.moe_workspace). ``non_torch`` and the per-graph CUDA
graph cost are estimates (fp8spec/data/memory_estimates.yaml). Every term is reported with its status.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fp8spec.plan.facts import estimate
from fp8spec.plan.setup import EngineSetup
from fp8spec.plan.weights import padded_vocab_rows

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts
    from fp8spec.plan.facts import ProfileFacts

ACT = 2  # activation bytes (bf16)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round256(n: int) -> int:
    return _cdiv(n, 256) * 256


@dataclass(frozen=True)
class EngineMemory:
    requested: int
    weights: int
    activation_peak: int
    non_torch: int
    cudagraph: int
    runner: str
    detail: dict = field(default_factory=dict)

    @property
    def available_kv(self) -> int:
        return self.requested - self.weights - self.activation_peak - self.non_torch - self.cudagraph


def runner_of(model: ModelFacts, facts: ProfileFacts) -> str:
    """vLLM 0.24 runs these architectures on its V2 model runner (profile fact memory.v2_runner_architectures)."""
    return "v2" if model.architecture in facts.value("memory.v2_runner_architectures") else "v1"


def _per_rank(model, tp: int) -> dict:
    q = _cdiv(model.q_size, tp)
    if model.attention == "mla":
        kv = model.kv_size  # the latent, replicated
    else:
        kv = 2 * max(1, model.num_key_value_heads // tp) * model.head_dim
    return {"q": q, "kv": kv}


def _moe_workspace(model, s: EngineSetup, tokens: int) -> int:
    """Two persistent buffers of the fused-MoE workspace manager (memory.moe_workspace)."""
    if not model.is_moe:
        return 0
    inter = model.moe_intermediate_size if s.ep > 1 else model.moe_intermediate_size // s.tp
    k, h = model.num_experts_per_tok, model.hidden_size
    ws13 = tokens * k * max(inter, h) * ACT
    ws2 = tokens * k * max(2 * inter, h) * ACT
    return _round256(ws13) + _round256(ws2)


def _forward_phases(model, s: EngineSetup, tokens: int, runner: str, fp8: bool) -> dict:
    """Bytes alive at each phase of a forward pass over ``tokens`` tokens (workspace not included)."""
    h = model.hidden_size
    resid = 2 * tokens * h * ACT  # hidden states and residual stream
    phases = {}
    if model.dense_layers or not model.is_moe:
        inter = _cdiv(model.intermediate_size, s.tp)
        phases["dense_mlp"] = resid + tokens * 3 * inter * ACT  # gate_up output + activation
    if model.is_moe:
        quant = tokens * h * (1 + 4 / 128) if fp8 else 0  # a1q + its per-128 scales
        shared = 0
        if model.shared_expert_intermediate_size:
            shared = tokens * 3 * _cdiv(model.shared_expert_intermediate_size, s.tp) * ACT
        phases["moe"] = resid + int(quant) + shared
    if runner == "v1":  # V2 skips attention in the profiling run
        r = _per_rank(model, s.tp)
        phases["attention"] = resid + tokens * (2 * (r["q"] + r["kv"]) + 2 * r["q"]) * ACT
    return phases


def _cudagraph_estimate(model, s: EngineSetup, runner: str, facts, fp8: bool) -> tuple[int, dict]:
    if runner == "v2" or not s.cuda_graphs or not facts.value("memory.cudagraph_estimate_applied"):
        return 0, {"graphs": 0, "reason": "V2 runner: no estimate" if runner == "v2" else "off"}
    cg = facts.value("memory.cudagraph_estimate")
    max_size = min(s.max_num_seqs * cg["seqs_factor"], cg["max_capture_size"], s.max_num_batched_tokens)
    sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    if s.max_num_batched_tokens <= max_size:
        sizes.append(s.max_num_batched_tokens)
    sizes = sorted(set(sizes))
    full = [x for x in sizes if x <= s.max_num_seqs]  # FULL_AND_PIECEWISE: decode graphs up to max_num_seqs
    per_graph = max(
        int(estimate("vllm", "cudagraph_bytes_per_graph_per_layer")) * model.num_hidden_layers,
        int(cg["min_per_graph_bytes"]),
    )
    total = 0
    for graphs in (sizes, full):
        if graphs:
            first = max(_forward_phases(model, s, graphs[-1], "v1", fp8).values())
            total += first + per_graph * (len(graphs) - 1)
    return total, {
        "graphs": len(sizes) + len(full),
        "piecewise": len(sizes),
        "full": len(full),
        "per_graph_bytes": per_graph,
    }


def vllm_engine_memory(
    model: ModelFacts, s: EngineSetup, weights: int, facts: ProfileFacts, *, fp8_linear: bool
) -> EngineMemory:
    runner = runner_of(model, facts)
    requested = math.ceil(s.total_bytes * s.utilization)  # the same float arithmetic as vLLM
    tokens = s.max_num_batched_tokens
    rows = min(tokens, s.max_num_seqs)
    workspace = _moe_workspace(model, s, tokens)
    phases = _forward_phases(model, s, tokens, runner, fp8_linear)
    forward = max(phases.values()) + workspace
    vocab = padded_vocab_rows(model.vocab_size, 1, facts.value("memory.vocab_padding"))
    per_logit = facts.value("memory.profile_sampler_bytes_per_logit")[runner]
    sampler = workspace + tokens * model.hidden_size * ACT + rows * vocab * per_logit
    if runner == "v1" and s.sms:  # cached Triton top-k/top-p buffer
        sampler += min(1 << (min(s.sms, rows) - 1).bit_length(), s.sms) * vocab * 4
    activation = max(forward, sampler)
    non_torch = int(estimate("vllm", "non_torch_bytes"))
    if s.tp > 1 or s.ep > 1:
        non_torch += int(estimate("vllm", "non_torch_extra_bytes_tp"))
    cudagraph, cg_detail = _cudagraph_estimate(model, s, runner, facts, fp8_linear)
    detail = {
        "forward_phases": phases,
        "moe_workspace": workspace,
        "forward_peak": forward,
        "sampler_peak": sampler,
        "sampled_rows": rows,
        "cudagraph": cg_detail,
    }
    return EngineMemory(requested, weights, activation, non_torch, cudagraph, runner, detail)
