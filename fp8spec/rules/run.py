"""What a run keeps: checkpoints on shared storage, resumption, validation data, loggers verl knows."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "RUN001",
    "no-checkpoint-folder",
    "error",
    "The run saves no checkpoints to a shared folder.",
    """verl 0.9.1 saves nothing unless trainer.save_freq > 0 (default -1, verl/trainer/ppo/v1/trainer_base.py:481),
    and its default_local_dir is relative (checkpoints/<project>/<experiment>, ppo_trainer.yaml:217), so under
    `ray job submit` it lands in the job's temporary working_dir and is gone when the job ends. A long run
    that stops early then has nothing to resume from.""",
    "set trainer.checkpoint_dir to an absolute folder every node shares, e.g. /shared/checkpoints/<spec name>",
    needs_model=False,
    examples=Examples(
        bad={"trainer": {"checkpoint_dir": None}},
        good={"trainer": {"checkpoint_dir": "/shared/ckpt"}},
        message="trainer.checkpoint_dir is not set",
    ),
)
def no_checkpoint_folder(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.trainer.checkpoint_dir is None:
        yield Finding(
            "trainer.checkpoint_dir is not set: checkpoints would land in the Ray job's temporary "
            "working_dir",
            "trainer.checkpoint_dir",
        )


@rule(
    "RUN002",
    "no-validation-files",
    "error",
    "The run has no validation data.",
    """verl 0.9.1 builds a validation set from data.val_files unconditionally (trainer_base.py:718-725); when the
    spec leaves it unset, verl reads its own default ~/data/rlhf/gsm8k/test.parquet (legacy_data.yaml:14) and
    fails at start on any cluster without it. Validation is also how a run shows it still learns.""",
    "set data.val_files to the evaluation parquet file(s) on the cluster",
    needs_model=False,
    examples=Examples(
        bad={"data": {"val_files": None}},
        good={"data": {"val_files": "/data/val.parquet"}},
        message="~/data/rlhf/gsm8k/test.parquet",
    ),
)
def no_validation_files(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.data.val_files is None:
        yield Finding(
            "data.val_files is not set: verl would read ~/data/rlhf/gsm8k/test.parquet", "data.val_files"
        )


@rule(
    "RUN003",
    "logger-unknown",
    "error",
    "A logger verl does not know.",
    """verl's Tracking asserts every trainer.logger entry is one of its supported backends
    (verl/utils/tracking.py:49-71) when the trainer starts; the list is the verl profile's
    values.trainer_logger.""",
    "use loggers from the list in the message",
    needs_model=False,
    examples=Examples(
        bad={"trainer": {"loggers": ["console", "wandbb"]}},
        good={"trainer": {"loggers": ["console", "wandb"]}},
        message="did you mean wandb?",
    ),
)
def logger_unknown(ctx: ResolvedSpec) -> Iterator[Finding]:
    known = ctx.fact("verl", "values.trainer_logger")
    if not known:
        return
    for i, name in enumerate(ctx.spec.trainer.loggers):
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            yield Finding(
                f"logger {name!r} is not one of verl {ctx.spec.stack.verl}'s: {', '.join(known)}{hint}",
                f"trainer.loggers.{i}",
            )


@rule(
    "RUN004",
    "resume-path-inconsistent",
    "error",
    "trainer.resume and trainer.resume_from disagree.",
    """verl's resume_mode resume_path asserts resume_from_path is a string containing 'global_step_'
    (trainer_base.py:865-868); with auto or disable it ignores resume_from_path, so a path given there would
    silently not be used.""",
    "use resume: resume_path with resume_from: /shared/.../global_step_N, or drop resume_from",
    needs_model=False,
    examples=Examples(
        bad={"trainer": {"resume": "resume_path"}},
        good={"trainer": {"resume": "resume_path", "resume_from": "/shared/ckpt/global_step_40"}},
        message="resume_from is not set",
    ),
)
def resume_path(ctx: ResolvedSpec) -> Iterator[Finding]:
    t = ctx.spec.trainer
    if t.resume == "resume_path" and t.resume_from is None:
        yield Finding("trainer.resume is resume_path but trainer.resume_from is not set", "trainer.resume")
    elif t.resume_from is not None and t.resume != "resume_path":
        yield Finding(f"trainer.resume_from is ignored with resume {t.resume}", "trainer.resume_from")
    elif t.resume_from is not None and "global_step_" not in t.resume_from:
        yield Finding(
            f"trainer.resume_from {t.resume_from} is not a .../global_step_N checkpoint folder",
            "trainer.resume_from",
        )
