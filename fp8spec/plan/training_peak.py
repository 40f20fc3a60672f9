"""MEM005 / MEM006: the training peak against the GPU, the terms it is made of, and the settings that lower it
(the update's token budget or micro-batch, the old-log-prob pass's, parallelism, shorter responses)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from fp8spec.plan.facts import estimate
from fp8spec.plan.verdict import Advice, Verdict, advice, gib
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan


def _peak_terms(t) -> list[tuple[str, int]]:
    """Every term of the training peak, named; they sum to ``t.peak``."""
    if t.peak_phase == "old log-prob":
        return [
            ("state", t.state),
            ("the old-log-prob pass", t.log_prob_pass),
            ("CUDA context", t.context),
        ]
    if t.peak_phase == "optimizer step":
        return [
            ("state", t.state),
            ("the optimizer step's temporaries", t.optimizer_step),
            ("CUDA context", t.context),
        ]
    return [
        ("state", t.state),
        ("activations", t.activations),
        ("logits", t.logits),
        (get_trainer(t.backend).transient_buffers, t.transient),
        ("CUDA context", t.context),
    ]


def _log_prob_advice(spec, t) -> list[Advice]:
    """The old-log-prob pass sets the peak: its micro-batches down to the update's."""
    a = spec.algorithm
    if a.use_dynamic_bsz:
        return [
            advice(
                f"algorithm.log_prob_max_token_len_per_gpu: {t.micro_batch_tokens} (the update's budget)",
                algorithm__log_prob_max_token_len_per_gpu=t.micro_batch_tokens,
            )
        ]
    return [
        advice(
            f"algorithm.log_prob_micro_batch_size_per_gpu: {a.ppo_micro_batch_size_per_gpu} (the update's)",
            algorithm__log_prob_micro_batch_size_per_gpu=a.ppo_micro_batch_size_per_gpu,
        )
    ]


def _peak_advice(plan: MemoryPlan) -> tuple[Advice, ...]:
    """Ways to a lower training peak, each with the values it sets; a token budget only above its floor (one
    sequence: a lower one is PAR012) and a micro-batch only above 1."""
    spec = plan.spec
    trainer = get_trainer(spec.training.backend)
    r, a = spec.rollout, spec.algorithm
    out: list[Advice] = []
    sequence = r.max_prompt_length + r.max_response_length
    budget_above_floor = False
    t = plan.trainer
    if t is not None and t.peak_phase == "old log-prob":
        out += _log_prob_advice(spec, t)
    if a.use_dynamic_bsz:
        split = spec.training.parallel.cp if trainer.parallel_layout else 1
        floor = -(-sequence // split)
        budget = a.ppo_max_token_len_per_gpu or (plan.trainer.micro_batch_tokens if plan.trainer else 0)
        budget_above_floor = budget > floor
        if budget_above_floor:
            out.append(
                advice(
                    f"algorithm.ppo_max_token_len_per_gpu: {floor} (one sequence per micro-batch)",
                    algorithm__ppo_max_token_len_per_gpu=floor,
                )
            )
    elif a.ppo_micro_batch_size_per_gpu > 1:
        out.append(
            advice("algorithm.ppo_micro_batch_size_per_gpu: 1", algorithm__ppo_micro_batch_size_per_gpu=1)
        )
    if trainer.parallel_layout:
        p, gpn, world = spec.training.parallel, spec.hardware.gpus_per_node, spec.world_size
        out += [
            advice(
                f"training.parallel.tp: {n} (sequence parallel splits activations)", training__parallel__tp=n
            )
            for n in (2, 4, 8)
            if p.tp < n <= gpn
        ]
        out += [
            advice(f"training.parallel.pp: {n}", training__parallel__pp=n)
            for n in (2, 4)
            if p.pp < n and world % n == 0
        ]
        out += [advice("training.parallel.cp: 2", training__parallel__cp=2)] if p.cp == 1 else []
    # the same ways without values, for where none of the values passes: only those the spec can still take
    ways = [
        "a lower token budget" if a.use_dynamic_bsz and budget_above_floor else None,
        "a smaller micro-batch" if not a.use_dynamic_bsz and a.ppo_micro_batch_size_per_gpu > 1 else None,
        "shorter responses",
        "more GPUs",
        "a larger training.parallel.tp, pp or cp" if trainer.parallel_layout else None,
    ]
    kept = [w for w in ways if w]
    out.append(Advice(", ".join(kept[:-1]) + " or " + kept[-1]))
    out += [
        advice(
            f"rollout.max_response_length: {r.max_response_length // d}",
            rollout__max_response_length=r.max_response_length // d,
        )
        for d in (2, 4)
    ]
    return tuple(out)


def trainer_activations(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM005: the training peak, activations included (an estimate), exceeds the GPU (within the margin
    of the estimate; beyond it, MEM006)."""
    t = plan.trainer
    if t is None:
        return None
    ok = t.peak <= plan.total_bytes
    terms = " + ".join(f"{name} {gib(n)}" for name, n in _peak_terms(t))
    msg = f"estimated training peak per GPU is {gib(t.peak)} = {terms}, on a {gib(plan.total_bytes)} GPU"
    return Verdict(
        "MEM005", ok, msg, _peak_advice(plan), {"peak": t.peak}, "algorithm.ppo_micro_batch_size_per_gpu"
    )


def peak_margin() -> float:
    """Share of the GPU by which a predicted training peak may exceed it and still be only a warning."""
    return float(estimate("trainer", "peak_margin"))


def trainer_peak_far_beyond(plan: MemoryPlan) -> Optional[Verdict]:
    """MEM006: the training peak exceeds the GPU by more than the estimate's margin: an error."""
    base = trainer_activations(plan)
    if base is None:
        return None
    limit = plan.total_bytes * (1 + peak_margin())
    ok = base.numbers["peak"] <= limit
    msg = base.message + f", beyond it by more than {peak_margin():.0%} ({gib(limit)})"
    return Verdict("MEM006", ok, msg, base.advice, base.numbers, base.path)
