"""The reward: a manager verl ships, DAPO's overlong shaping where it applies, a custom function that loads."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import REWARD_FILE, REWARD_FILES, Examples
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "RWD001",
    "reward-manager-unknown",
    "error",
    "A reward manager the pinned verl does not ship.",
    """verl's RewardManagerConfig asserts the name is registered ("Reward manager is not registered",
    verl/workers/config/reward.py:52-58); verl 0.9.1 registers dapo, gdpo, naive, rate_limited and remote
    (verl/experimental/reward_loop/reward_manager/*.py, the verl profile's values.reward_manager).""",
    "use a reward manager from the list in the message",
    needs_model=False,
    examples=Examples(
        bad={"reward": {"manager": "naiv"}},
        good={"reward": {"manager": "dapo"}},
        message="did you mean naive?",
    ),
)
def manager_unknown(ctx: ResolvedSpec) -> Iterator[Finding]:
    known = ctx.fact("verl", "values.reward_manager")
    name = ctx.spec.reward.manager
    if known and name not in known:
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        yield Finding(
            f"reward manager {name!r} is not one of verl {ctx.spec.stack.verl}'s: {', '.join(known)}{hint}",
            "reward.manager",
        )


@rule(
    "RWD002",
    "overlong-needs-dapo",
    "error",
    "DAPO overlong shaping with a reward manager that ignores it.",
    """Only verl's dapo reward manager reads reward.reward_kwargs.overlong_buffer_cfg
    (verl/experimental/reward_loop/reward_manager/dapo.py:33-50); naive and the others never look at it,
    so the run would train without the penalty the spec asks for.""",
    "set reward.manager: dapo, or remove reward.overlong_buffer",
    needs_model=False,
    examples=Examples(
        bad={"reward": {"manager": "naive", "overlong_buffer": 512}},
        good={"reward": {"manager": "dapo", "overlong_buffer": 512}},
        message="no effect with reward manager 'naive'",
    ),
)
def overlong_needs_dapo(ctx: ResolvedSpec) -> Iterator[Finding]:
    r = ctx.spec.reward
    if r.overlong_buffer is not None and r.manager != "dapo":
        yield Finding(
            f"reward.overlong_buffer has no effect with reward manager {r.manager!r}", "reward.manager"
        )


@rule(
    "RWD003",
    "overlong-buffer-too-long",
    "error",
    "The overlong buffer is longer than the longest response.",
    """verl's DAPO reward manager asserts "max_resp_len must be larger than overlong_buffer.len" when it starts
    (dapo.py:43-45); max_resp_len is rollout.max_response_length.""",
    "make reward.overlong_buffer at most rollout.max_response_length (DAPO used 4096 of 20480)",
    needs_model=False,
    examples=Examples(
        bad={"reward": {"manager": "dapo", "overlong_buffer": 30000}},
        good={"reward": {"manager": "dapo", "overlong_buffer": 20480}},
        message="longer than rollout.max_response_length",
    ),
)
def overlong_too_long(ctx: ResolvedSpec) -> Iterator[Finding]:
    r, max_resp = ctx.spec.reward, ctx.spec.rollout.max_response_length
    if r.overlong_buffer is not None and r.overlong_buffer > max_resp:
        yield Finding(
            f"reward.overlong_buffer {r.overlong_buffer} is longer than rollout.max_response_length "
            f"{max_resp}",
            "reward.overlong_buffer",
        )


@rule(
    "RWD004",
    "reward-file-unusable",
    "error",
    "The custom reward function cannot be shipped or loaded.",
    """fp8spec copies reward.custom_function.path into the bundle and verl imports it there and looks the
    function up by name (verl/trainer/ppo/reward.py:70-80, verl/utils/import_utils.py:248-261); a missing,
    unreadable or non-Python file, a syntax error or a missing function would stop every reward worker.""",
    "fix the file or reward.custom_function.name as the message says",
    needs_model=False,
    examples=Examples(
        bad={"reward": {"custom_function": {"path": REWARD_FILE, "name": "score"}}},
        good={"reward": {"custom_function": {"path": REWARD_FILE, "name": "compute_score"}}},
        message="defines no top-level 'score'",
        files=REWARD_FILES,
    ),
)
def reward_file_unusable(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.reward_problem is not None:
        yield Finding(ctx.reward_problem.message, ctx.reward_problem.path)


@rule(
    "RWD005",
    "reward-file-outside-working-dir",
    "error",
    "The custom reward file would not be in the Ray working_dir.",
    """verl opens a relative reward path from the reward worker's working directory (import_utils.py:175-179),
    which Ray sets to the job's working_dir. The bundle ships the file in its own folder, so the bundle
    folder must be the working_dir (cluster.working_dir '.').""",
    "set cluster.working_dir: '.' (the default)",
    needs_model=False,
    examples=Examples(
        bad={"reward": {"custom_function": {"path": REWARD_FILE}}, "cluster": {"working_dir": ".."}},
        good={"reward": {"custom_function": {"path": REWARD_FILE}}, "cluster": {"working_dir": "."}},
        message="cluster.working_dir is '..'",
        files=REWARD_FILES,
    ),
)
def reward_file_outside_working_dir(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.reward.custom_function is not None and spec.cluster.working_dir != ".":
        yield Finding(
            f"cluster.working_dir is {spec.cluster.working_dir!r}, so the reward file shipped in the "
            "bundle folder is not where verl looks for it",
            "cluster.working_dir",
        )
