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
from functools import lru_cache
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.engine_memory import EngineMemoryModel
from fp8spec.plan.facts import ProfileFacts, estimate, gpu_memory, profile_facts
from fp8spec.plan.setup import EngineMemory, EngineSetup, PlanInputError
from fp8spec.plan.weights import padded_vocab_rows

if TYPE_CHECKING:
    from fp8spec.catalog import ModelFacts

ACT = 2  # activation bytes (bf16)


@lru_cache(maxsize=1)
def memory_model_version() -> str:
    """The vLLM release whose memory model is profiled (the newest profile with memory.* facts); the others fall
    back to it, and the plan says so."""
    from fp8spec.profiles import available_versions, load_profile

    return [v for v in available_versions("vllm") if load_profile("vllm", v).has("memory.available_kv")][-1]


def memory_facts(version: str) -> ProfileFacts:
    return profile_facts("vllm", version, memory_model_version(), "memory.available_kv")


def memory_notes(setup: EngineSetup, facts: ProfileFacts) -> list[str]:
    if not facts.fallback:
        return []
    return [
        f"vLLM {setup.engine_version} has no profiled memory model; vLLM {memory_model_version()}'s is used"
    ]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round256(n: int) -> int:
    return _cdiv(n, 256) * 256


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


def vllm_llm_class_setup(
    gpu: str,
    *,
    utilization: float,
    max_model_len: int,
    kv_dtype: str = "bf16",
    tp: int = 1,
    total_bytes: Optional[int] = None,
    max_num_batched_tokens: Optional[int] = None,
    max_num_seqs: Optional[int] = None,
    cuda_graphs: bool = True,
    version: Optional[str] = None,
) -> EngineSetup:
    """A standalone ``vllm.LLM(...)`` engine with vLLM's own batch defaults for this GPU
    (profile fact memory.batch_defaults), as a measurement on one GPU runs it."""
    mem = gpu_memory(gpu)
    total = total_bytes if total_bytes is not None else mem.total_bytes
    if total is None:
        raise PlanInputError(f"the memory of GPU {gpu!r} is not recorded; give total_bytes")
    version = version or memory_model_version()
    facts = profile_facts("vllm", version, memory_model_version(), "memory.batch_defaults")
    d = facts.value("memory.batch_defaults")
    size = "large" if total >= d["large_gpu_min_gib"] * (1 << 30) and gpu != "a100" else "other"
    batch = d[size]["llm_class"]
    return EngineSetup(
        engine="vllm",
        engine_version=version,
        gpu=gpu,
        total_bytes=total,
        sms=mem.sms,
        utilization=utilization,
        tp=tp,
        ep=1,
        max_num_batched_tokens=max_num_batched_tokens or int(batch["max_num_batched_tokens"]),
        max_num_seqs=max_num_seqs or int(batch["max_num_seqs"]),
        max_model_len=max_model_len,
        cuda_graphs=cuda_graphs,
        kv_dtype=kv_dtype,
        defaults=f"vLLM {version} LLM-class defaults ({size} GPU)",
    )


class VLLMMemory(EngineMemoryModel):
    @property
    def memory_source(self) -> str:
        version = memory_model_version()
        return f"backends/vllm/{version}.yaml memory.* facts (vLLM {version} source, file:line)"

    def memory_facts(self, version: str) -> ProfileFacts:
        return memory_facts(version)

    def engine_memory(
        self,
        model: ModelFacts,
        setup: EngineSetup,
        weights: int,
        facts: ProfileFacts,
        quantized: Optional[frozenset[str]],
    ) -> tuple[EngineMemory, int]:
        memory = vllm_engine_memory(model, setup, weights, facts, fp8_linear=quantized is not None)
        return memory, facts.value("memory.block_size")

    def memory_notes(self, setup: EngineSetup, facts: ProfileFacts) -> list[str]:
        return memory_notes(setup, facts)


MODEL = VLLMMemory()
