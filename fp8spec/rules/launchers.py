"""Launchers: what a spec adds to a generated launcher must not undo what the launcher sets from the spec."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.profiles.sbatch import SBATCH_VERSION, judge, time_problem
from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "LCH001",
    "sbatch-option-not-allowed",
    "error",
    "An extra #SBATCH option is unknown to sbatch, ambiguous, abbreviated, or one the launcher sets itself.",
    f"""slurm.sbatch writes nodes, GPUs per node, one task per node, --exclusive, time, partition, account and
    job name from the spec, and starts one Ray node per Slurm node; a second or contradicting option in
    cluster.slurm.extra_sbatch would silently change the allocation (sbatch takes the last one). sbatch
    reads #SBATCH lines with getopt_long, which accepts any unique prefix of a long option, so an option is
    judged by what sbatch would read: --partitio=x is --partition=x (sbatch {SBATCH_VERSION}'s option table,
    read from Slurm's source: backends/slurm/sbatch-{SBATCH_VERSION}.yaml). Only job options that leave the
    launcher's layout alone are allowed, written in full (a prefix unique today may not be in another
    Slurm release).""",
    "remove the option, set it through the spec field named in the message, or write its full name",
    needs_model=False,
    examples=Examples(
        bad={"cluster": {"slurm": {"extra_sbatch": ["--qos=high", "--partitio=long"]}}},
        good={"cluster": {"slurm": {"extra_sbatch": ["--qos=high", "--mem-per-gpu=80G"]}}},
        message="sbatch reads it as --partition",
    ),
)
def sbatch_option_not_allowed(ctx: ResolvedSpec) -> Iterator[Finding]:
    for index, option in enumerate(ctx.spec.cluster.slurm.extra_sbatch):
        problem = judge(option)
        if problem is not None:
            message, fix = problem
            path = f"cluster.slurm.extra_sbatch.{index}"
            yield Finding(f"cluster.slurm.extra_sbatch: {message}", path, fix)


@rule(
    "LCH002",
    "sbatch-time-limit-invalid",
    "error",
    "cluster.slurm.time_limit is not a time sbatch accepts.",
    f"""slurm.sbatch writes #SBATCH --time from cluster.slurm.time_limit; sbatch refuses a value its parser
    does not read ("Invalid --time specification") and the job never starts. The formats are Slurm's own
    (src/common/parse_time.c _is_valid_timespec and time_str2secs, read at sbatch {SBATCH_VERSION}'s commit:
    backends/slurm/sbatch-{SBATCH_VERSION}.yaml, time_format): minutes, minutes:seconds,
    hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds, or UNLIMITED.""",
    "write it as hours:minutes:seconds (48:00:00) or days-hours:minutes:seconds (2-00:00:00)",
    needs_model=False,
    examples=Examples(
        bad={"cluster": {"slurm": {"time_limit": "1:2:3:4"}}},
        good={"cluster": {"slurm": {"time_limit": "2-00:00:00"}}},
        message="sbatch would refuse it",
    ),
)
def sbatch_time_limit_invalid(ctx: ResolvedSpec) -> Iterator[Finding]:
    limit = ctx.spec.cluster.slurm.time_limit
    problem = time_problem(limit)
    if problem is not None:
        yield Finding(
            f"cluster.slurm.time_limit {limit!r}: sbatch would refuse it ({problem})",
            "cluster.slurm.time_limit",
        )
