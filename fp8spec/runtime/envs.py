"""Every environment variable the runtime patch set reads, declared once (vLLM's ``vllm/envs.py`` is the model):
its name, the patch that reads it, its type, its default as written in the environment, the parser that turns
the text into a typed value, and what it does.

The manifest lists each patch's variables and defaults from here, the compiler names the variables it sets from
here, and the patches read them only through ``EnvVar.read`` (directly, or through the settings objects in
``settings.py``). A malformed value raises a one-line ``ValueError`` naming the variable, in the worker that reads
it. Imports nothing but the standard library: the manifest (plain data) reads this module too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

# vLLM's Q/K/V_SCALE_CONSTANT, which its own calc_kv_scales divides amax by (vLLM 0.24.0 vllm/envs.py lines
# 143-145); fp8_max gives the tightest scales, amax / 448.
VLLM_CALC_DIVISORS = (200.0, 200.0, 100.0)
FP8_MAX_DIVISORS = (448.0, 448.0, 448.0)
KV_PHASES = ("compute_log_prob", "update_actor")
QUANT_BACKENDS = ("auto", "triton", "reference")

Divisors = Union[tuple[float, float, float], str]


@dataclass(frozen=True)
class EnvVar:
    name: str
    patch: str  # the patch that reads it; "" for the patch set itself
    type: str  # what ``parse`` returns, in words (the manifest and docs show it)
    default: str  # as it would be written in the environment
    parse: Callable[[str], Any]  # text -> typed value; ValueError("must be ..., got ...") when malformed
    doc: str
    empty_is_unset: bool = True  # False: set but empty is a value of its own (an empty list)

    def read(self, env: Optional[Mapping[str, str]] = None, default: Optional[str] = None) -> Any:
        """The typed value in ``env`` (default: the process environment), or of ``default`` (default: the
        declared one) when unset or blank."""
        env = os.environ if env is None else env
        raw = env.get(self.name)
        if raw is None or (not raw.strip() and self.empty_is_unset):
            raw = self.default if default is None else default
        try:
            return self.parse(raw.strip())
        except ValueError as err:
            raise ValueError(f"{self.name} {err}") from None


def _choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in values:
            raise ValueError(f"must be {' or '.join(values)}, got {text!r}")
        return text

    return parse


def _switch(text: str) -> bool:
    value = text.lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be 0 or 1, got {text!r}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"must be a positive whole number, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"must be a positive number of seconds, got {text!r}")
    return value


def _names(text: str) -> list[str]:
    return list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


# training.bf16_modules' classes; module_precision.MODULE_GLOBS maps each to megatron-core's module names
BF16_MODULE_CLASSES = ("attention", "dense_mlp", "experts", "shared_experts")


def _module_classes(text: str) -> list[str]:
    classes = _names(text)
    unknown = [c for c in classes if c not in BF16_MODULE_CLASSES]
    if unknown:
        raise ValueError(f"must name classes among {', '.join(BF16_MODULE_CLASSES)}, got {text!r}")
    return classes


def _divisors(text: str) -> Divisors:
    if text == "vllm":
        return VLLM_CALC_DIVISORS
    if text == "fp8_max":
        return "fp8_max"
    try:
        parts = tuple(float(p) for p in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or not all(p > 0 for p in parts):
        raise ValueError(f"must be vllm, fp8_max or 'q,k,v' (three positive numbers), got {text!r}")
    return (parts[0], parts[1], parts[2])


def _phases(text: str) -> frozenset[str]:
    phases = frozenset(_names(text))
    if phases - set(KV_PHASES):
        raise ValueError(f"must be a comma list of {', '.join(KV_PHASES)} (or empty: none), got {text!r}")
    return phases


RUNTIME_PATCHES = EnvVar(
    name="FP8SPEC_RUNTIME_PATCHES",
    patch="",
    type="comma list",
    default="",
    parse=_names,
    doc="the patches to activate in this process (unset or empty: importing fp8spec.runtime does nothing)",
)
LOG_LEVEL = EnvVar(
    name="FP8SPEC_LOG_LEVEL",
    patch="",
    type="log level",
    default="INFO",
    parse=str.upper,
    doc="level of the patch set's own log lines (an unknown level: INFO)",
)
ALLOW_UNKNOWN_VERSIONS = EnvVar(
    name="FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS",
    patch="",
    type="1 or unset",
    default="",
    parse=lambda text: text == "1",
    doc="1 patches an engine/verl version the patch set was not written against (not recommended)",
)
KV_SCALE_DIVISORS = EnvVar(
    name="FP8SPEC_KV_SCALE_DIVISORS",
    patch="kv_scales",
    type="divisors",
    default="vllm",
    parse=_divisors,
    doc="vllm = q/k/v amax/(200,200,100); fp8_max = amax/448; or 'q,k,v'",
)
KV_CALIB_PHASES = EnvVar(
    name="FP8SPEC_KV_CALIB_PHASES",
    patch="kv_scales",
    type="comma list",
    default=",".join(KV_PHASES),
    parse=_phases,
    doc="the trainer forwards that observe q/k/v (comma list)",
    empty_is_unset=False,  # set but empty: no forward observes (calibration off)
)
KV_RECALIBRATE = EnvVar(
    name="FP8SPEC_KV_RECALIBRATE",
    patch="kv_scales",
    type="choice",
    default="per_step",
    parse=_choice("per_step", "once"),
    doc="per_step, or once = keep the first scales computed from rollout data",
)
UE8M0_RULE = EnvVar(
    "FP8SPEC_UE8M0_RULE",
    "ue8m0_scales",
    "choice",
    "ue8m0",
    _choice("ue8m0", "ue8m0_fixed"),
    "ue8m0, or ue8m0_fixed: scales that vLLM's requantization leaves bit-identical",
)
BLOCK_QUANT_BACKEND = EnvVar(
    name="FP8SPEC_BLOCK_QUANT_BACKEND",
    patch="fast_block_quant",
    type="choice",
    default="auto",
    parse=_choice(*QUANT_BACKENDS),
    doc="auto | triton | reference",
)
QUANT_CHUNK_MB = EnvVar(
    name="FP8SPEC_QUANT_CHUNK_MB",
    patch="fast_block_quant",
    type="MB",
    default="2048",
    parse=_positive_int,
    doc="tensor-list fallback: launch per chunk of this size",
)


SEND_CAST_BF16 = EnvVar(
    name="FP8SPEC_SEND_CAST_BF16",
    patch="direct_sync",
    type="switch",
    default="1",
    parse=_switch,
    doc="trainer side: send float32 *.weight tensors as BF16, cast as they are copied into the bucket (the values "
    "verl's receiver casts them to for a BF16 engine; half the bucket bytes; byte-exact against a fresh Qwen3-8B "
    "engine, its float32 sync 0.066 -> 0.048 s, docs/results.md#weight-sync); an engine of another dtype refuses the "
    "bucket: 0 for such an engine",
)

BF16_MODULES = EnvVar(
    name="FP8SPEC_BF16_MODULES",
    patch="module_precision",
    type="comma list",
    default="",
    parse=_module_classes,
    doc="trainer side: module classes TransformerEngine runs in BF16 under FP8 training (attention, dense_mlp, "
    "experts, shared_experts), through megatron-core's quant_recipe",
)

REPLAY_POLL_S = EnvVar(
    name="FP8SPEC_REPLAY_POLL_S",
    patch="replay_poll",
    type="seconds",
    default="0.1",
    parse=_positive_seconds,
    doc="driver side: how often verl's sync replay buffer looks for finished rollouts (verl's default, 2 s, "
    "ends each step's generation on the next multiple of it)",
)

# The table, in the order the manifest lists each patch's variables.
VARIABLES: tuple[EnvVar, ...] = (
    RUNTIME_PATCHES,
    LOG_LEVEL,
    ALLOW_UNKNOWN_VERSIONS,
    KV_SCALE_DIVISORS,
    KV_CALIB_PHASES,
    KV_RECALIBRATE,
    UE8M0_RULE,
    BLOCK_QUANT_BACKEND,
    QUANT_CHUNK_MB,
    SEND_CAST_BF16,
    BF16_MODULES,
    REPLAY_POLL_S,
)
BY_NAME = {v.name: v for v in VARIABLES}


def of_patch(patch: str) -> tuple[EnvVar, ...]:
    return tuple(v for v in VARIABLES if v.patch == patch)


def env_defaults(patch: str) -> dict[str, str]:
    """Variable -> default, for the variables of ``patch`` (the manifest's ``env``)."""
    return {v.name: v.default for v in of_patch(patch)}


def env_help(patch: str) -> dict[str, str]:
    return {v.name: v.doc for v in of_patch(patch)}


def check_environment(patches: set[str] | frozenset[str], env: Optional[Mapping[str, str]] = None) -> None:
    """Read every variable of ``patches`` once: a malformed value fails here, when the patches activate in a
    worker, with the variable's name, instead of later inside an engine's load path."""
    for v in VARIABLES:
        if v.patch in patches:
            v.read(env)
