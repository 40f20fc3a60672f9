"""Will the run fit? Verdicts over a plan, with the numbers and the settings that would fit.

The MEM rules (fp8spec/rules/memory.py) turn these into diagnostics; `fp8spec plan` prints them too.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from fp8spec.engines import get_engine
from fp8spec.plan.facts import engine_beyond_share
from fp8spec.plan.training_peak import trainer_activations, trainer_peak_far_beyond
from fp8spec.plan.verdict import (
    NO_THROUGHPUT_COST,
    Advice,
    Verdict,
    advice,
    capped_throughput_loss,
    concurrency_cost,
    gib,
    margin_text,
    proposal_headroom,
)
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.plan.rollout import RolloutResult
    from fp8spec.plan.trainer import TrainerMemory

#: below this share of the running sequences fitting at full length, preemption is "heavy"
HEAVY_PREEMPTION_SHARE = 0.5


def trainer_state(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM001: the optimizer step needs parameters, gradients and optimizer state on the GPU at once."""
    t = plan.trainer
    if t is None:
        return None
    usable = plan.total_bytes - t.context
    ok = t.state <= usable
    # a lower bound: every byte per parameter counted once over the cluster, as if perfectly sharded
    min_gpus = math.ceil(t.model_params * t.bytes_per_param / usable)
    gpn = plan.gpus_per_node
    nodes = math.ceil(min_gpus / gpn)
    why = (
        f"the state needs at least {min_gpus} GPUs even perfectly sharded ({t.bytes_per_param} bytes per "
        f"parameter x {t.model_params / 1e9:.1f}B parameters)"
    )
    out = [advice(f"hardware.nodes: {nodes} ({nodes * gpn} GPUs; {why})", hardware__nodes=nodes)]
    out += [
        advice(f"hardware.nodes: {n} ({n * gpn} GPUs)", hardware__nodes=n) for n in (nodes + 1, 2 * nodes)
    ]
    if get_trainer(t.backend).parallel_layout:
        p = plan.spec.training.parallel
        for n in (2, 4, 8):
            if p.pp < n and plan.model.num_hidden_layers % n == 0:
                out.append(
                    advice(f"training.parallel.pp: {n} shrinks each GPU's layers", training__parallel__pp=n)
                )
        if plan.model.is_moe:
            for n in (8, 16, 32):
                if p.ep < n:
                    out.append(
                        advice(f"training.parallel.ep: {n} shards the experts", training__parallel__ep=n)
                    )
        # where neither more nodes nor a layout alone fits: both, at the lower bound and twice it
        layouts = [
            ("training.parallel.pp", n)
            for n in (2, 4, 8)
            if p.pp < n and plan.model.num_hidden_layers % n == 0
        ]
        layouts += [("training.parallel.ep", n) for n in (16, 32) if plan.model.is_moe and p.ep < n]
        for n in (nodes, 2 * nodes):
            for name, value in layouts:
                both = (("hardware.nodes", n), (name, value))
                out.append(Advice(f"hardware.nodes: {n}, {name}: {value}", both, fallback=True))
    else:
        out.append(
            Advice(
                "training.backend megatron with the distributed optimizer needs 6 + 12/dp bytes per parameter"
            )
        )
    msg = (
        f"trainer state per GPU is {gib(t.state)} (params {gib(t.params)}, grads {gib(t.grads)}, optimizer "
        f"{gib(t.optimizer)}"
        + (f", FP8 weight caches {gib(t.fp8_weight_cache)}" if t.fp8_weight_cache else "")
        + f") but a {plan.gpu} holds {gib(usable)} after the CUDA context; {why}"
    )
    return Verdict(
        "MEM001", ok, msg, tuple(out), {"state": t.state, "usable": usable, "min_gpus": min_gpus}, "training"
    )


def rollout_weights(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM002: the engine must keep KV memory for at least one max_model_len request at its utilisation."""
    r = plan.spec_rollout
    problem = {
        "no_kv_memory": "no memory left for the KV cache",
        "below_one_request": "the KV cache cannot hold one request of max_model_len tokens",
    }.get(r.kv_shortfall or "")
    if problem is None:
        return Verdict("MEM002", True, path="rollout.gpu_memory_utilization")
    m = r.memory
    need = m.weights + m.activation_peak + m.non_torch + m.cudagraph + m.load_cache + r.kv.one_request_bytes
    util = math.ceil((need + proposal_headroom()) / plan.total_bytes * 100) / 100
    msg = (
        f"rollout engine ({r.choice.label}) at gpu_memory_utilization {plan.setup.utilization:g}: "
        f"{problem}: requested {gib(m.requested)} - weights {gib(m.weights)} - activations {gib(m.activation_peak)}"
        f" - non-torch {gib(m.non_torch)} - CUDA graphs {gib(m.cudagraph)}"
        + (f" - load cache {gib(m.load_cache)}" if m.load_cache else "")
        + f" = {gib(m.available_kv)}, one request "
        f"of {plan.setup.max_model_len} tokens needs {gib(r.kv.one_request_bytes)}"
    )
    fixes = []
    if util <= 1.0:
        fixes.append(
            advice(
                f"rollout.gpu_memory_utilization: {util:.2f}",
                cost=f"{NO_THROUGHPUT_COST}; {gib(proposal_headroom())} of KV room beyond one request",
                loss=0.0,
                rollout__gpu_memory_utilization=util,
            )
        )
    need_len = plan.spec.rollout.max_prompt_length + plan.spec.rollout.max_response_length
    if need_len < plan.setup.max_model_len:
        fixes.append(
            advice(
                f"rollout.max_model_len: {need_len} reserves KV for prompt + response only",
                rollout__max_model_len=need_len,
            )
        )
    for tp in (2, 4, 8):
        if plan.setup.tp < tp <= plan.gpus_per_node:
            fixes.append(advice(f"rollout.tp: {tp} splits the weights", rollout__tp=tp))
    if not plan.spec.linear.quantize:
        fixes.append(advice("linear.quantize: true halves the weights", linear__quantize=True))
    # what to try where no value above passes: only what the spec has not done already
    general = ["a larger rollout.tp (more GPUs per replica)", "a shorter rollout.max_model_len"]
    if plan.setup.utilization < 1.0:
        general.insert(0, "a larger rollout.gpu_memory_utilization")
    if not plan.spec.linear.quantize:
        general.append("FP8 linears")
    fixes.append(Advice(", ".join(general[:-1]) + " or " + general[-1]))
    if util <= 1.0 and plan.trainer is not None:
        # a larger engine share may not fit beside the trainer's resident state (MEM003) unless it is offloaded
        share = (("rollout.gpu_memory_utilization", util),)
        for what in (("optimizer",), ("optimizer", "params")):
            both = share + tuple((f"training.offload.{w}", True) for w in what)
            fixes.append(Advice(", ".join(f"{k}: {v}" for k, v in both), both, fallback=True))
    return Verdict(
        "MEM002", False, msg, tuple(fixes), {"min_utilization": util}, "rollout.gpu_memory_utilization"
    )


def max_colocated_utilization(plan: MemoryPlan) -> float:
    """The largest rollout share (two decimals) that leaves the proposal headroom beside the trainer's resident
    state and both CUDA contexts; 1.0 without a colocated trainer."""
    t = plan.trainer
    if t is None:
        return 1.0
    room = plan.total_bytes - t.resident_during_rollout - engine_beyond_share(plan.setup.engine)
    return math.floor(max(room - proposal_headroom(), 0) / plan.total_bytes * 100) / 100


def _kept_parts(t: TrainerMemory) -> str:
    """What the trainer's resident bytes are made of, as MEM003 names them."""
    named = [f"{gib(v)} {k}" if k == "measured beyond them" else k for k, v in t.resident_parts.items()]
    return ", ".join(named)


def colocation(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM003: what the trainer keeps on the GPU during rollout plus the engine's share must fit the GPU."""
    t = plan.trainer
    if t is None:
        return None
    engine_ctx = engine_beyond_share(plan.setup.engine)
    requested = plan.spec_rollout.memory.requested
    used = t.resident_during_rollout + engine_ctx + requested
    ok = plan.headroom(t) >= 0
    room = plan.total_bytes - t.resident_during_rollout - engine_ctx
    max_util = max_colocated_utilization(plan)
    fixes = []
    if max_util > 0:
        fixes.append(
            advice(
                f"rollout.gpu_memory_utilization: {max_util:.2f}",
                cost=f"less KV room; {margin_text()}",
                rollout__gpu_memory_utilization=max_util,
            )
        )
    off = {what: not t.offload.get(what) for what in ("optimizer", "params")}
    # offloading the params releases a gradient buffer that otherwise stays resident
    grads = t.grads if get_trainer(t.backend).grad_buffer_resident else 0
    frees = {"optimizer": t.optimizer, "params": t.params + grads}
    for what in ("optimizer", "params"):
        if off[what]:
            fixes.append(
                Advice(
                    f"training.offload.{what}: true frees {gib(frees[what])} during rollout",
                    ((f"training.offload.{what}", True),),
                )
            )
    if all(off.values()):
        fixes.append(
            Advice(
                f"training.offload.optimizer: true, training.offload.params: true free "
                f"{gib(frees['optimizer'] + frees['params'])}",
                (("training.offload.optimizer", True), ("training.offload.params", True)),
            )
        )
    refusal = get_engine(plan.setup.engine).start_refusal
    msg = (
        f"during rollout the trainer keeps {gib(t.resident_during_rollout)} per GPU ({_kept_parts(t)}) and the "
        f"engine asks for {gib(requested)} (gpu_memory_utilization {plan.setup.utilization:g}) plus "
        f"{gib(engine_ctx)} outside it: {gib(used)} on a {gib(plan.total_bytes)} GPU; {refusal}"
    )
    return Verdict(
        "MEM003",
        ok,
        msg,
        tuple(fixes),
        {"used": used, "max_utilization": max_util, "room": room},
        "rollout.gpu_memory_utilization",
    )


def preemption(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM004: the KV cache holds fewer than half of the running sequences at full length. The ways out are
    ranked by what they cost the rollout: more KV room (FP8 KV, FP8 linears, a larger engine share) costs no
    throughput; capping the sequences at once (rollout.max_num_seqs) does, and says how much."""
    r = plan.spec_rollout
    if r.kv_shortfall is not None or r.running == 0:
        return None
    share = r.concurrency / r.running
    ok = share >= HEAVY_PREEMPTION_SHARE
    fixes = []
    free = NO_THROUGHPUT_COST
    if r.choice.kv_dtype == "bf16":
        fp8 = next((x for x in plan.rollout if x.choice.key == "fp8_kv"), None)
        if fp8 is not None:
            fixes.append(
                advice(
                    f"kv_cache.dtype: fp8_e4m3 ({fp8.concurrency:.0f} sequences fit)",
                    cost=free,
                    loss=0.0,
                    kv_cache__dtype="fp8_e4m3",
                )
            )
            fixes.append(
                advice(
                    f"kv_cache.dtype: fp8_e4m3, kv_cache.recalibrate: none ({fp8.concurrency:.0f} fit; scales 1.0)",
                    cost=free,
                    loss=0.0,
                    kv_cache__dtype="fp8_e4m3",
                    kv_cache__recalibrate="none",
                )
            )
    if not plan.spec.linear.quantize:
        fp8w = next((x for x in plan.rollout if x.choice.key == "fp8"), None)
        if fp8w is not None:
            fixes.append(
                advice(
                    f"linear.quantize: true ({fp8w.concurrency:.0f} fit)",
                    cost=free,
                    loss=0.0,
                    linear__quantize=True,
                )
            )
    fixes += _more_kv_share(plan, r)
    if 1 <= int(r.concurrency) < r.running:
        cap = int(r.concurrency)
        spec_r = plan.spec.rollout
        loss = capped_throughput_loss(r, cap, spec_r.max_prompt_length, spec_r.max_response_length)
        fixes.append(
            advice(
                f"rollout.max_num_seqs: {cap} (all of them fit at full length)",
                cost=concurrency_cost(r.running, cap, loss),
                loss=loss,
                rollout__max_num_seqs=cap,
            )
        )
    fixes.append(Advice("a larger rollout.tp or gpu_memory_utilization, or a shorter max_response_length"))
    msg = (
        f"the engine runs {r.running} sequences of up to {r.seq_len} tokens per replica but its KV cache "
        f"({r.kv.tokens:,} tokens) holds {int(r.concurrency)} at full length ({share:.0%}): long responses "
        "will be preempted and recomputed"
    )
    return Verdict("MEM004", ok, msg, tuple(fixes), {"share": share}, "rollout.max_response_length")


def _more_kv_share(plan: MemoryPlan, r: RolloutResult) -> list[Advice]:
    """A larger rollout.gpu_memory_utilization that fits every running sequence (else half of them, the rule's
    threshold) at full length, where one up to the colocated maximum (with the proposal headroom) does."""
    m = r.memory
    overhead = (
        m.requested - m.available_kv
    )  # weights, activations, non-torch, CUDA graphs: fixed by the share
    top = min(max_colocated_utilization(plan), 0.95)
    out = []
    for want in (r.running, math.ceil(r.running * HEAVY_PREEMPTION_SHARE)):
        blocks = want * -(-r.seq_len // r.kv.block_size)
        need = overhead + blocks * r.kv.page_bytes * r.kv.layers
        util = math.ceil(need / plan.total_bytes * 100) / 100
        if plan.setup.utilization < util <= top:
            out.append(
                advice(
                    f"rollout.gpu_memory_utilization: {util:.2f} ({want} sequences fit)",
                    cost=NO_THROUGHPUT_COST,
                    loss=0.0,
                    rollout__gpu_memory_utilization=util,
                )
            )
            break
    return out


def at_sync(plan: MemoryPlan, t: TrainerMemory) -> tuple[int, int, int]:
    """Bytes per GPU at a colocated weight sync: the trainer's, the engine's, and both with the bucket."""
    trainer = t.resident_during_rollout + (t.params if t.offload.get("params") else 0)
    engine = plan.spec_rollout.memory.weights + engine_beyond_share(plan.setup.engine)
    return trainer, engine, trainer + engine + (plan.setup.sync_bucket_bytes or 0)


def sync_bucket(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM007: at a colocated weight sync the engine's weights are resumed and its KV cache is not (verl 0.9.1
    engine_workers.py:766-782), the trainer's parameters are on the GPU (offloaded ones are loaded back to be
    sent) and the sender allocates one bucket beside them: all of it must fit the GPU."""
    t, bucket = plan.trainer, plan.setup.sync_bucket_bytes
    if t is None or bucket is None:
        return None
    trainer, engine, used = at_sync(plan, t)
    room = plan.total_bytes - trainer - engine
    fixes = []
    # a round size, well above verl's per-tensor fallback, leaving the proposal headroom
    fit_mb = (max(room - proposal_headroom(), 0) >> 20) // 256 * 256
    if fit_mb >= 256:
        fixes.append(
            advice(
                f"rollout.sync_bucket_mb: {fit_mb}",
                cost=f"more sync calls per step; {margin_text()}",
                rollout__sync_bucket_mb=fit_mb,
            )
        )
    if not t.offload.get("optimizer"):
        fixes.append(
            Advice(
                f"training.offload.optimizer: true frees {gib(t.optimizer)} during the sync",
                (("training.offload.optimizer", True),),
            )
        )
    msg = (
        f"at each weight sync the trainer keeps {gib(trainer)} per GPU (parameters, optimizer, CUDA context), "
        f"the engine's weights and context take {gib(engine)} and the sync bucket {gib(bucket)} "
        f"(rollout.sync_bucket_mb): {gib(used)} on a {gib(plan.total_bytes)} GPU"
    )
    return Verdict(
        "MEM007", used <= plan.total_bytes, msg, tuple(fixes), {"used": used}, "rollout.sync_bucket_mb"
    )


def verdicts(plan: MemoryPlan) -> list[Verdict]:
    return [
        v
        for v in (
            trainer_state(plan),
            rollout_weights(plan),
            colocation(plan),
            preemption(plan),
            trainer_activations(plan),
            trainer_peak_far_beyond(plan),
            sync_bucket(plan),
        )
        if v is not None
    ]
