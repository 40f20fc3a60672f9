"""Versioned backend profiles: what each release of verl, vLLM, SGLang, Megatron-core and
TransformerEngine accepts and can do, each fact with its evidence.

    from fp8spec.profiles import load_profile, available_versions
    p = load_profile("vllm", "0.33.0")
    p.value("flag.kv_cache_dtype")      # "--kv-cache-dtype"
    p.evidence("flag.kv_cache_dtype")   # "vllm/engine/arg_utils.py:1397 ..."
    available_versions("vllm")          # ["0.24.0", "0.33.0"]

The data lives in ``backends/<kind>/<version>.yaml`` (see backends/README.md for the format).
"""

from fp8spec.profiles.loader import (
    ProfileError,
    ProfileNotFound,
    available_kinds,
    available_versions,
    backends_root,
    clear_cache,
    latest_version,
    load_profile,
    parse_profile_file,
    parse_profile_text,
    profile_path,
    version_key,
)
from fp8spec.profiles.model import KINDS, Confirm, Fact, Profile, Source, UnknownFact

__all__ = [
    "KINDS",
    "Confirm",
    "Fact",
    "Profile",
    "ProfileError",
    "ProfileNotFound",
    "Source",
    "UnknownFact",
    "available_kinds",
    "available_versions",
    "backends_root",
    "clear_cache",
    "latest_version",
    "load_profile",
    "parse_profile_file",
    "parse_profile_text",
    "profile_path",
    "version_key",
]
