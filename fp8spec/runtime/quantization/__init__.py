"""Blockwise FP8 quantization of weight-sync buckets: the torch reference, the Triton kernel and its launch plans,
and the flat-bucket engine that quantizes a received bucket in place (patches fast_block_quant, ue8m0_scales)."""
