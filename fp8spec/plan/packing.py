"""How large a packed update micro-batch the training peak leaves room for: the token budget a spec could set.

A micro-batch's activations and logits grow with its tokens; the state, the CUDA context and FSDP's gather
buffers do not. So the largest budget is the room the GPU leaves beside them, less the share kept free for what
the GPU was measured to hold beyond the planned peak (memory_estimates.yaml trainer.packing_free_share), divided
by what one token takes in the update, floored to 1,024 tokens and capped at one mini-batch per GPU. The
old-log-prob passes at the same budget hold less per token (no gradients, one layer's activations). Only said
where packing is cheap: dynamic batching on, and an attention that attends each packed sequence on its own (not
the FSDP trainer's sdpa or eager, rule PAR016).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from fp8spec.plan.facts import estimate
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.plan.trainer import TrainerMemory

STEP = 1024  # budgets are proposed in whole thousands of tokens


@dataclass(frozen=True)
class PackingRoom:
    tokens: int  # the largest budget (a multiple of STEP), 0 when not even one sequence fits
    sequence_tokens: int  # one sequence per GPU: prompt + response, over context parallelism
    budget: int  # the spec's own budget (its longest update micro-batch)
    kept_free: int  # bytes of the GPU the budget leaves free at least, beside its estimated peak
    whole_mini_batch: bool = False  # the budget holds every sequence a GPU trains on per optimizer step

    @property
    def sequences(self) -> float:
        return self.tokens / self.sequence_tokens


def packing_room(plan: MemoryPlan, t: Optional[TrainerMemory] = None) -> Optional[PackingRoom]:
    """The largest update token budget for the spec's trainer (or ``t``, the same layout in another precision);
    None where the spec does not pack by tokens or its attention packs at a cost."""
    t = t or plan.trainer
    spec = plan.spec
    if t is None or not spec.algorithm.use_dynamic_bsz or not t.micro_batch_tokens:
        return None
    trainer = get_trainer(spec.training.backend)
    if spec.training.attention in trainer.dense_mask_attention:
        return None
    per_token = (t.activations + t.logits) / t.micro_batch_tokens
    free = int(plan.total_bytes * float(estimate("trainer", "packing_free_share")[spec.training.backend]))
    room = plan.total_bytes - free - t.state - t.context - t.transient
    split = spec.training.parallel.cp if trainer.parallel_layout else 1  # context parallel splits a sequence
    sequence = -(-(spec.rollout.max_prompt_length + spec.rollout.max_response_length) // split)
    tokens = int(room / per_token) // STEP * STEP if room > 0 and per_token > 0 else 0
    # a micro-batch never holds more than the GPU's share of one mini-batch
    dp = t.layout.get("dp", t.layout.get("world", 1))
    mini = -(-spec.algorithm.ppo_mini_batch_size * spec.rollout.n // dp) * sequence
    if tokens >= mini:
        return PackingRoom(mini, sequence, t.micro_batch_tokens, free, whole_mini_batch=True)
    return PackingRoom(tokens if tokens >= sequence else 0, sequence, t.micro_batch_tokens, free)


def packing_note(room: PackingRoom) -> str:
    """One line for `fp8spec plan`: the budget that fits against the spec's own."""
    free = f"{room.kept_free / 2**30:.1f} GiB of the GPU kept free (trainer.packing_free_share)"
    own = f"the spec's update micro-batches hold up to {room.budget:,} tokens"
    if room.whole_mini_batch:
        return (
            f"packing: one micro-batch holds a whole mini-batch's {room.sequences:.0f} sequences per GPU "
            f"({room.tokens:,} tokens) with {free}; {own}"
        )
    if not room.tokens:
        return f"packing: not even one {room.sequence_tokens:,}-token sequence per micro-batch fits with {free}; {own}"
    return (
        f"packing: update micro-batches of up to {room.tokens:,} tokens ({room.sequences:.1f} sequences of "
        f"{room.sequence_tokens:,}) fit with {free} (algorithm.ppo_max_token_len_per_gpu); {own}"
    )
