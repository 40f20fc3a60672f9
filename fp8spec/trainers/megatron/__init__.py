"""Megatron: verl's model_engine=megatron (megatron-core with TransformerEngine), the whole topic in one folder.

This module is the descriptor (names and capabilities); beside it:

- ``layout``: the Megatron layout with its resolved defaults (etp, uneven pipeline stages), a port of
  megatron-core's own arithmetic (ResolvedSpec.megatron);
- ``rules``: the layout rules (PAR001, PAR008-PAR011), megatron-core's start-up checks run before a GPU is booked;
- ``adapter``: the verl overrides and TransformerEngine settings a Megatron run compiles to;
- ``snapshot``: the static extractor of megatron-core wheels (backends/snapshots/megatron-core-*.json);
- ``config_check``: megatron-core's own ``TransformerConfig`` validation on CPU torch (conformance tests).
"""

from __future__ import annotations

from fp8spec.trainers.base import Trainer


class Megatron(Trainer):
    name = "megatron"
    label = "Megatron"
    parallel_layout = True
    fp8_training = True
    router_replay = True
    router_dtype = True
    bridge = True
    # verl's default attention_backend flash makes TE use the flash-attn package (megatron language_module.py:128)
    flash_attention_package = ("transformer-engine", "package.flash_attn_for_te")
    verl_model_engine = "megatron"
    settings_adapter = "fp8spec.trainers.megatron.adapter:build_megatron"
    grad_buffer_resident = True  # Megatron releases its grad buffer only with param offload
    hf_model = False
    # verl hands Megatron a packed micro-batch as THD with each sequence's bounds (verl 0.9.1 models/mcore/util.py
    # preprocess_packed_seqs), which every attention backend attends one sequence at a time
    dense_mask_attention = ()
    stack_fields = ("megatron_core", "transformer_engine")


TRAINER = Megatron()
