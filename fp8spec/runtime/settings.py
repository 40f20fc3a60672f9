"""The runtime's settings, read from the environment into typed objects (no torch: the manifest reads it too).

Every variable is declared once, in ``envs.VARIABLES`` (name, patch, type, default, parser, what it does); the
patches read their settings through ``KVSettings.from_env`` and ``QuantSettings.from_env``, which refuse a
malformed value with a one-line ``ValueError`` naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from fp8spec.runtime import envs
from fp8spec.runtime.envs import Divisors


@dataclass(frozen=True)
class KVSettings:
    """kv_scales: how scales are computed, from which forwards, and whether they are recalibrated."""

    divisors: Divisors
    phases: frozenset[str]
    recalibrate: str  # per_step | once

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KVSettings:
        env = os.environ if env is None else env
        return cls(
            envs.KV_SCALE_DIVISORS.read(env), envs.KV_CALIB_PHASES.read(env), envs.KV_RECALIBRATE.read(env)
        )


@dataclass(frozen=True)
class QuantSettings:
    """The weight-sync quantizer (ue8m0_scales, fast_block_quant): scale format, kernel, and the flat path's
    shortcuts, all on (docs/results.md#quantization-kernel); no variable turns one off: the tests set a field to False to
    compare against the plain path it replaced."""

    scale_fmt: str = "fp32"
    backend: str = "reference"
    chunk_bytes: int = 2048 << 20
    flat_buckets: bool = True  # one launch on the received flat buffer
    reuse_outputs: bool = True  # output views made once per layout, reused
    # layout key hashed from the metadata message's length and ends (equality still compares every byte), and
    # the check that the selected tensors are the receiver's views made after the launch
    lean_prelaunch: bool = True
    fast_launch: bool = True  # the compiled kernel's own launcher instead of kernel[grid](...) (self-tested)

    @classmethod
    def from_env(
        cls, active: set[str] | frozenset[str], env: Mapping[str, str] | None = None
    ) -> QuantSettings:
        """The settings for the active patches: ue8m0 scales only with ue8m0_scales, the Triton kernel by default
        only with fast_block_quant."""
        env = os.environ if env is None else env
        fmt = envs.UE8M0_RULE.read(env) if "ue8m0_scales" in active else "fp32"
        # unset, the Triton kernel is the default only where fast_block_quant is active
        backend = envs.BLOCK_QUANT_BACKEND.read(env, None if "fast_block_quant" in active else "reference")
        return cls(scale_fmt=fmt, backend=backend, chunk_bytes=envs.QUANT_CHUNK_MB.read(env) << 20)
