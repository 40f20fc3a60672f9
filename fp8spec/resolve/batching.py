"""Micro-batching of the trainer's passes: fixed sizes, or per-GPU token budgets with dynamic batching."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fp8spec.specfile.model import Spec
from fp8spec.trainers import get_trainer


@dataclass(frozen=True)
class Batching:
    dynamic: bool
    sequence_tokens: int  # max_prompt_length + max_response_length: the longest sequence a pass sees
    ppo_micro_batch_size_per_gpu: int
    log_prob_micro_batch_size_per_gpu: int
    ppo_max_token_len_per_gpu: int
    log_prob_max_token_len_per_gpu: int
    ref_log_prob_max_token_len_per_gpu: int
    sequence_split: int  # GPUs one sequence is split over (Megatron context parallel), 1 for FSDP

    def budgets(self) -> list[tuple[str, int]]:
        """(spec field, tokens per GPU) of every dynamic-batching budget, actor update first."""
        return [
            ("ppo_max_token_len_per_gpu", self.ppo_max_token_len_per_gpu),
            ("log_prob_max_token_len_per_gpu", self.log_prob_max_token_len_per_gpu),
            ("ref_log_prob_max_token_len_per_gpu", self.ref_log_prob_max_token_len_per_gpu),
        ]


def batching(spec: Spec) -> Batching:
    a = spec.algorithm
    sequence = spec.rollout.max_prompt_length + spec.rollout.max_response_length
    ppo = a.ppo_max_token_len_per_gpu or sequence
    log_prob = a.log_prob_max_token_len_per_gpu or ppo
    ref = a.ref_log_prob_max_token_len_per_gpu or log_prob
    split = spec.training.parallel.cp if get_trainer(spec.training.backend).parallel_layout else 1
    return Batching(
        dynamic=a.use_dynamic_bsz,
        sequence_tokens=sequence,
        ppo_micro_batch_size_per_gpu=a.ppo_micro_batch_size_per_gpu,
        log_prob_micro_batch_size_per_gpu=a.log_prob_micro_batch_size_per_gpu
        or a.ppo_micro_batch_size_per_gpu,
        ppo_max_token_len_per_gpu=ppo,
        log_prob_max_token_len_per_gpu=log_prob,
        ref_log_prob_max_token_len_per_gpu=ref,
        sequence_split=split,
    )


def explicit_budgets(spec: Spec) -> list[tuple[str, Optional[int]]]:
    """The budgets the spec writes itself (None where it relies on the default)."""
    a = spec.algorithm
    return [
        ("ppo_max_token_len_per_gpu", a.ppo_max_token_len_per_gpu),
        ("log_prob_max_token_len_per_gpu", a.log_prob_max_token_len_per_gpu),
        ("ref_log_prob_max_token_len_per_gpu", a.ref_log_prob_max_token_len_per_gpu),
    ]
