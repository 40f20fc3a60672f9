"""Dynamic batching: per-GPU token budgets against the longest sequence a pass can see."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.resolve.batching import explicit_budgets
from fp8spec.rules.examples import Examples
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "PAR012",
    "token-budget-below-sequence",
    "error",
    "A dynamic-batching token budget cannot hold one full sequence.",
    """With use_dynamic_bsz verl packs each micro-batch up to max_token_len_per_gpu * sp tokens (sp = Megatron
    context_parallel_size, 1 for FSDP: verl/workers/engine/utils.py:108-111) and rearrange_micro_batches
    asserts "max_token_len must be greater than the sequence length" (verl/utils/seqlen_balancing.py:384), so
    the first batch holding a sequence of max_prompt_length + max_response_length tokens stops the run.""",
    "raise the budget to at least the number in the message, or leave it unset (it then defaults to that)",
    needs_model=False,
    examples=Examples(
        bad={"algorithm": {"ppo_max_token_len_per_gpu": 8000}},
        good={"algorithm": {"ppo_max_token_len_per_gpu": 22528}},
        message="at least 22528 holds one sequence",
    ),
)
def budget_below_sequence(ctx: ResolvedSpec) -> Iterator[Finding]:
    b = ctx.batching
    if not b.dynamic:
        return
    r = ctx.spec.rollout
    split = b.sequence_split
    least = -(-b.sequence_tokens // split)
    for field, value in explicit_budgets(ctx.spec):
        if value is not None and value * split < b.sequence_tokens:
            times = f" x cp {split} = {value * split}" if split > 1 else ""
            path = f"algorithm.{field}"
            hint, ok = proposal(
                ctx,
                "PAR012",
                path,
                [{path: least}],
                f"raise it to at least {least}, or leave it unset (the default is that)",
            )
            yield Finding(
                f"algorithm.{field} {value}{times} tokens is below max_prompt_length + "
                f"max_response_length = {r.max_prompt_length} + {r.max_response_length} = "
                f"{b.sequence_tokens}; at least {least} holds one sequence",
                path,
                hint,
                ok,
            )


@rule(
    "PAR013",
    "token-budget-ignored",
    "warning",
    "Token budgets are set but dynamic batching is off.",
    """verl reads ppo_max_token_len_per_gpu and the log-prob budgets only with use_dynamic_bsz
    (verl/workers/engine/utils.py:108-124); without it micro-batches are the fixed *_micro_batch_size_per_gpu.""",
    "set algorithm.use_dynamic_bsz: true, or remove the budgets",
    needs_model=False,
    examples=Examples(
        bad={"algorithm": {"use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 30000}},
        good={"algorithm": {"use_dynamic_bsz": False}},
        message="no effect with use_dynamic_bsz false",
    ),
)
def budget_ignored(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.batching.dynamic:
        return
    for field, value in explicit_budgets(ctx.spec):
        if value is not None:
            yield Finding(f"algorithm.{field} has no effect with use_dynamic_bsz false", f"algorithm.{field}")


@rule(
    "PAR016",
    "dense-attention-over-packed-rows",
    "warning",
    "sdpa or eager attention on the FSDP trainer with micro-batches of more than one sequence.",
    """verl's FSDP engine removes padding by packing a micro-batch's sequences into one row with per-sequence
    position ids (backends/verl/0.9.1.yaml package.packed_sequence_masks), and transformers masks across them for
    sdpa and eager with a dense block-causal mask over the whole row (tests/compiler/test_sdpa_packing.py). The
    attention work then grows with the square of the micro-batch's tokens, not of each sequence's: a Qwen3-4B
    update with 12,288-token micro-batches ran at verl MFU 0.054 (measured:real_step.window.mfu_actor), its
    attention FLOPs close to its linear layers'. flash_attention_2 attends per sequence (varlen), and
    flex_attention gets a block-sparse mask that skips the blocks between sequences
    (tests/compiler/test_flex_packing.py); with sdpa or eager, one sequence per micro-batch keeps the mask to
    one sequence.""",
    "leave the token budgets unset (one sequence each), or use training.attention: flash_attention_2 where "
    "flash-attn is installed",
    needs_model=False,
    examples=Examples(
        bad={"training": {"attention": "sdpa"}, "algorithm": {"ppo_max_token_len_per_gpu": 45056}},
        good={"training": {"attention": "sdpa"}},
        message="dense mask over the packed row",
    ),
)
def dense_attention_over_packed_rows(ctx: ResolvedSpec) -> Iterator[Finding]:
    attention = ctx.spec.training.attention
    if attention not in ctx.trainer.dense_mask_attention:
        return
    b = ctx.batching
    seq = b.sequence_tokens
    if not b.dynamic:
        if b.ppo_micro_batch_size_per_gpu > 1:
            path = "algorithm.ppo_micro_batch_size_per_gpu"
            yield Finding(
                f"{path} {b.ppo_micro_batch_size_per_gpu} packs up to {b.ppo_micro_batch_size_per_gpu} sequences "
                f"into one row, and {attention} attends over it with a dense mask over the packed row",
                path,
            )
        return
    for field, value in explicit_budgets(ctx.spec):
        if value is None or value <= seq:
            continue
        path = f"algorithm.{field}"
        hint, ok = proposal(
            ctx,
            "PAR016",
            path,
            [{path: seq}],
            f"set it to {seq} (one sequence per micro-batch), or use flash_attention_2",
        )
        yield Finding(
            f"{path} {value} packs up to {value // seq} sequences of {seq} tokens into one row, and {attention} "
            f"attends over it with a dense mask over the packed row: attention work grows with the square of "
            f"{value} tokens instead of {seq} per sequence",
            path,
            hint,
            ok,
        )
