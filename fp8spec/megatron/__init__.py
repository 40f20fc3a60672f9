"""Everything fp8spec knows about the Megatron trainer, in one place:

- ``layout``: the Megatron layout with its resolved defaults (etp, uneven pipeline stages), a port of
  megatron-core's own arithmetic (ResolvedSpec.megatron);
- ``rules``: the layout rules (PAR001, PAR008-PAR011), megatron-core's start-up checks run before a GPU is booked;
- ``adapter``: the verl overrides and TransformerEngine settings a Megatron run compiles to;
- ``snapshot``: the static extractor of megatron-core wheels (backends/snapshots/megatron-core-*.json);
- ``config_check``: megatron-core's own ``TransformerConfig`` validation on CPU torch (conformance tests).
"""
