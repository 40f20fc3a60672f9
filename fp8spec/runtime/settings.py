"""The runtime's settings, read from the environment into typed objects (no torch: the manifest reads it too).

Every variable the patch set reads is declared once in ``VARIABLES`` (name, patch, default, what it does); the
manifest lists them per patch from here, and the patches read them only through ``KVSettings.from_env`` and
``QuantSettings.from_env``, which refuse a malformed value with a one-line ``ValueError`` naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

# vLLM's Q/K/V_SCALE_CONSTANT, which its own calc_kv_scales divides amax by (vLLM 0.24.0 vllm/envs.py lines
# 143-145); fp8_max gives the tightest scales, amax / 448.
VLLM_CALC_DIVISORS = (200.0, 200.0, 100.0)
FP8_MAX_DIVISORS = (448.0, 448.0, 448.0)
KV_PHASES = ("compute_log_prob", "update_actor")
SCALE_FORMATS = ("fp32", "ue8m0", "ue8m0_fixed")
QUANT_BACKENDS = ("auto", "triton", "reference")

Divisors = Union[tuple[float, float, float], str]


@dataclass(frozen=True)
class Variable:
    name: str
    patch: str
    default: str
    help: str


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "FP8SPEC_KV_SCALE_DIVISORS",
        "kv_scales",
        "vllm",
        "vllm = q/k/v amax/(200,200,100); fp8_max = amax/448; or 'q,k,v'",
    ),
    Variable(
        "FP8SPEC_KV_CALIB_PHASES",
        "kv_scales",
        ",".join(KV_PHASES),
        "the trainer forwards that observe q/k/v (comma list)",
    ),
    Variable(
        "FP8SPEC_KV_RECALIBRATE",
        "kv_scales",
        "per_step",
        "per_step, or once = keep the first scales computed from rollout data",
    ),
    Variable(
        "FP8SPEC_UE8M0_RULE",
        "ue8m0_scales",
        "ue8m0",
        "ue8m0, or ue8m0_fixed: scales that vLLM's requantization leaves bit-identical",
    ),
    Variable("FP8SPEC_BLOCK_QUANT_BACKEND", "fast_block_quant", "auto", "auto | triton | reference"),
    Variable(
        "FP8SPEC_QUANT_FLAT_BUCKETS",
        "fast_block_quant",
        "1",
        "vLLM path: one launch on the received flat buffer",
    ),
    Variable(
        "FP8SPEC_QUANT_REUSE_OUTPUTS",
        "fast_block_quant",
        "1",
        "output views made once per layout and handed out again",
    ),
    Variable(
        "FP8SPEC_QUANT_LEAN_PRELAUNCH",
        "fast_block_quant",
        "1",
        "cheaper layout key; identity check after the launch; no memory cost",
    ),
    Variable(
        "FP8SPEC_QUANT_FAST_LAUNCH",
        "fast_block_quant",
        "1",
        "launch through the compiled Triton kernel's runner (self-tested per process, falls back to "
        "kernel[grid]); no memory cost",
    ),
    Variable(
        "FP8SPEC_QUANT_PREALLOC_OUTPUTS",
        "fast_block_quant",
        "0",
        "re-allocate the output memory when the receiver maps the sender's buffer, before the first bucket; "
        "nothing held between syncs",
    ),
    Variable(
        "FP8SPEC_QUANT_KEEP_OUTPUTS",
        "fast_block_quant",
        "0",
        "keep the output memory between syncs: half a bucket of fp8 + scales (1 GiB with 2048 MB buckets) "
        "held per rollout GPU all the time",
    ),
    Variable(
        "FP8SPEC_QUANT_CHUNK_MB",
        "fast_block_quant",
        "2048",
        "tensor-list fallback: launch per chunk of this size",
    ),
)
_BY_NAME = {v.name: v for v in VARIABLES}

# QuantSettings switch -> its variable (BENCHMARKS.md section 3 has what each buys on an H200; the runtime README
# what each costs)
FLAT_KNOBS = {
    "flat_buckets": "FP8SPEC_QUANT_FLAT_BUCKETS",
    "reuse_outputs": "FP8SPEC_QUANT_REUSE_OUTPUTS",
    "lean_prelaunch": "FP8SPEC_QUANT_LEAN_PRELAUNCH",
    "fast_launch": "FP8SPEC_QUANT_FAST_LAUNCH",
    "prealloc_outputs": "FP8SPEC_QUANT_PREALLOC_OUTPUTS",
    "keep_outputs": "FP8SPEC_QUANT_KEEP_OUTPUTS",
}


def env_defaults(patch: str) -> dict[str, str]:
    """Variable -> default, for the variables of ``patch`` (the manifest's ``env``)."""
    return {v.name: v.default for v in VARIABLES if v.patch == patch}


def env_help(patch: str) -> dict[str, str]:
    return {v.name: v.help for v in VARIABLES if v.patch == patch}


def _raw(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value is not None and value.strip() else None


def _text(env: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = _raw(env, name)
    return (
        value.strip() if value is not None else (default if default is not None else _BY_NAME[name].default)
    )


def _switch(env: Mapping[str, str], name: str) -> bool:
    value = _text(env, name).lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 0 or 1, got {value!r}")


@dataclass(frozen=True)
class KVSettings:
    """kv_scales: how scales are computed, from which forwards, and whether they are recalibrated."""

    divisors: Divisors
    phases: frozenset[str]
    recalibrate: str  # per_step | once

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KVSettings:
        env = os.environ if env is None else env
        phases = env.get("FP8SPEC_KV_CALIB_PHASES")  # set but empty: no forward observes (calibration off)
        return cls(
            _divisors(_text(env, "FP8SPEC_KV_SCALE_DIVISORS")),
            _phases(_BY_NAME["FP8SPEC_KV_CALIB_PHASES"].default if phases is None else phases),
            _recalibrate(_text(env, "FP8SPEC_KV_RECALIBRATE")),
        )


def _divisors(value: str) -> Divisors:
    if value == "vllm":
        return VLLM_CALC_DIVISORS
    if value == "fp8_max":
        return "fp8_max"
    parts = tuple(float(p) for p in value.split(","))
    if len(parts) != 3:
        raise ValueError(f"FP8SPEC_KV_SCALE_DIVISORS must be vllm, fp8_max or 'q,k,v', got {value!r}")
    return (parts[0], parts[1], parts[2])


def _phases(value: str) -> frozenset[str]:
    phases = frozenset(p.strip() for p in value.split(",") if p.strip())
    bad = phases - set(KV_PHASES)
    if bad:
        raise ValueError(f"FP8SPEC_KV_CALIB_PHASES: unknown phase(s) {sorted(bad)}")
    return phases


def _recalibrate(value: str) -> str:
    if value not in ("per_step", "once"):
        raise ValueError(f"FP8SPEC_KV_RECALIBRATE must be per_step or once, got {value!r}")
    return value


@dataclass(frozen=True)
class QuantSettings:
    """The weight-sync quantizer (ue8m0_scales, fast_block_quant): scale format, kernel and the flat path's switches."""

    scale_fmt: str = "fp32"
    backend: str = "reference"
    chunk_bytes: int = 2048 << 20
    flat_buckets: bool = True  # one launch on the received flat buffer
    reuse_outputs: bool = True  # output views made once per layout, reused
    # layout key hashed from the metadata message's length and ends (equality still compares every byte), and
    # the check that the selected tensors are the receiver's views made after the launch
    lean_prelaunch: bool = True
    fast_launch: bool = True  # the compiled kernel's own launcher instead of kernel[grid](...) (self-tested)
    prealloc_outputs: bool = False  # re-allocate the output memory when the receiver has mapped its buffer
    keep_outputs: bool = False  # keep the output memory between weight syncs (half a bucket, all the time)

    @classmethod
    def from_env(
        cls, active: set[str] | frozenset[str], env: Mapping[str, str] | None = None
    ) -> QuantSettings:
        """The settings for the active patches: ue8m0 scales only with ue8m0_scales, the Triton kernel by default
        only with fast_block_quant."""
        env = os.environ if env is None else env
        fmt = "fp32"
        if "ue8m0_scales" in active:
            fmt = _text(env, "FP8SPEC_UE8M0_RULE")
            if fmt not in ("ue8m0", "ue8m0_fixed"):
                raise ValueError(f"FP8SPEC_UE8M0_RULE must be ue8m0 or ue8m0_fixed, got {fmt!r}")
        backend = _text(
            env, "FP8SPEC_BLOCK_QUANT_BACKEND", "auto" if "fast_block_quant" in active else "reference"
        )
        chunk_mb = int(_text(env, "FP8SPEC_QUANT_CHUNK_MB"))
        switches = {key: _switch(env, name) for key, name in FLAT_KNOBS.items()}
        return cls(scale_fmt=fmt, backend=backend, chunk_bytes=chunk_mb << 20, **switches)
