"""The run's state and what could not be read: crashed, still running (or stopped without a word), logs cut
short or skipped."""

from __future__ import annotations

from typing import Iterable

from fp8spec.report.verdicts.unit import Context, verdict

Found = Iterable[tuple[str, str]]


def _after(ctx: Context) -> str:
    return f"after step {ctx.run.last_step}" if ctx.run.steps else "before its first step"


@verdict(
    "RPT020",
    "run-crashed",
    "error",
    "The run stopped with a traceback before its last step.",
    """A traceback while the progress bar is short of its total is a crash: the steps after it never ran. verl's
    normal exit also prints one (a DataLoader worker killed at shutdown) after the bar reaches its total; that one
    is not a crash. The message gives the exception's line; the traceback is at the location given.""",
    "read the traceback at the location given; resume from the last checkpoint once fixed",
    example=(
        "the real 4B run ending after step 2 with the Megatron run's real traceback",
        "the run crashed after step 2: ray.exceptions.ActorUnavailableError",
        "the real 4B run (its traceback comes after the full progress bar)",
    ),
)
def crashed(ctx: Context) -> Found:
    if ctx.run.finished or not ctx.run.tracebacks:
        return
    where, exc = ctx.run.tracebacks[-1]
    yield str(where), f"the run crashed {_after(ctx)}: {exc}"


@verdict(
    "RPT021",
    "run-not-finished",
    "warning",
    "The logs end before the run's last step, without a traceback.",
    """The progress bar did not reach its total and no traceback was logged: the job is still running, or it was
    killed from outside (out of memory, a preempted node, a time limit) before it could say so. The table holds
    the steps logged so far.""",
    "run the report again when the job ends; if it is gone, look at the scheduler's record (ray job status, "
    "sacct) and the nodes' kernel log for an OOM kill",
    example=(
        "the real tiny FSDP + vLLM run's log ending after step 3",
        "run still running or crashed after step 3 of 5",
        "the real tiny FSDP + vLLM run",
    ),
)
def not_finished(ctx: Context) -> Found:
    run = ctx.run
    if run.finished or run.tracebacks:
        return
    total = f" of {run.total}" if run.total else ""
    where = run.steps[run.last_step].loc if run.steps else (run.progress[2] if run.progress else None)
    yield (
        str(where or (run.sources[0] if run.sources else "-")),
        (f"run still running or crashed {_after(ctx)}{total} (no traceback in the logs read)"),
    )


@verdict(
    "RPT022",
    "log-unreadable",
    "warning",
    "Part of the run's logs could not be read.",
    """A line cut mid-write (a live log, a truncated copy), an archive member that is a link or climbs out of
    the archive, or a file over the size limit is left out; what the report says rests on the rest. Each
    message names the place.""",
    "give the report the complete log (the whole folder or archive); archives should hold plain files",
    example=(
        "the real tiny FSDP + vLLM run's log cut in the middle of step 3's line",
        "the log ends in the middle of this step's line",
        "the real tiny FSDP + vLLM run",
    ),
)
def unreadable(ctx: Context) -> Found:
    yield from ctx.run.problems
