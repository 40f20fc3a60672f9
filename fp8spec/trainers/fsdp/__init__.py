"""FSDP: verl's default trainer (a Hugging Face model sharded by torch FSDP)."""

from __future__ import annotations

from fp8spec.trainers.base import Trainer


class FSDP(Trainer):
    name = "fsdp"
    label = "FSDP"
    transient_buffers = "FSDP gather buffers"  # the all-gathered parameters of the layers in flight
    # verl packs a micro-batch into one row; transformers masks it densely for these (tests/compiler/
    # test_sdpa_packing.py), per sequence for flash_attention_2 (varlen) and flex_attention (block-sparse)
    dense_mask_attention = ("sdpa", "eager")


TRAINER = FSDP()
