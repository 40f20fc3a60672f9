"""Reward of the one-H200 RL run (specs/tiny-qwen3-h200*.yaml), dense enough for a random-initialised model.

verl's GSM8K rule scores 1.0 for ``#### <answer>`` and 0.0 otherwise, so every response of a random model
scores 0, every GRPO advantage is 0 and the actor's gradient is 0 (seen in an H200 run,
docs/results.md#rl-runs). This keeps the rule and adds partial credit below it, half the share of digits in the response,
so the responses of a group differ and the policy moves from the first step.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"####\s*(-?\d+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl's custom reward signature (verl/experimental/reward_loop/reward_manager/naive.py 66-83)."""
    found = _ANSWER.search(solution_str)
    if found is not None and found.group(1) == str(ground_truth):
        return 1.0
    if not solution_str:
        return 0.0
    return 0.5 * sum(c.isdigit() for c in solution_str) / len(solution_str)
