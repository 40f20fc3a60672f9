"""FSDP: verl's default trainer (a Hugging Face model sharded by torch FSDP)."""

from __future__ import annotations

from fp8spec.trainers.base import Trainer


class FSDP(Trainer):
    name = "fsdp"
    label = "FSDP"
    transient_buffers = "FSDP gather buffers"  # the all-gathered parameters of the layers in flight


TRAINER = FSDP()
