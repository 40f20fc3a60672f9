"""verl's trainers (``training.backend``): what differs between FSDP and Megatron is said here, as data.

Every package ``fp8spec/trainers/<name>/`` is a trainer: its ``__init__`` defines ``TRAINER``, an
``fp8spec.trainers.base.Trainer`` whose class attributes are the trainer's names and capabilities. Rules, planner
and compiler ask the trainer object (``get_trainer(spec.training.backend)``, or ``ctx.trainer``), never compare its
name; listing trainers imports nothing but these descriptors.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fp8spec.trainers.base import Trainer

# The spec's choices, in this order (the first is the spec's default): verl's own default trainer first.
_ORDER = ("fsdp", "megatron")


class UnknownTrainer(LookupError):
    """No trainer folder has this name (a caller's mistake: names come from trainer_names())."""


def trainer_names() -> tuple[str, ...]:
    return _ORDER


@lru_cache(maxsize=None)
def get_trainer(name: str) -> Trainer:
    """The trainer called ``name`` (its folder's TRAINER)."""
    if name not in _ORDER:
        raise UnknownTrainer(f"no trainer {name!r}; trainers: {', '.join(_ORDER)}")
    trainer: Trainer = importlib.import_module(f"{__name__}.{name}").TRAINER
    if trainer.name != name:
        raise RuntimeError(f"fp8spec/trainers/{name}/ defines the trainer {trainer.name!r}")
    return trainer


def all_trainers() -> tuple[Trainer, ...]:
    return tuple(get_trainer(name) for name in _ORDER)
