"""Typed model of one backend profile: what one release of one backend is known to accept and do.

A profile is data (``backends/<kind>/<version>.yaml``); this module only says what a well-formed
profile looks like.  Every fact carries the evidence it was read from, so a reviewer can check it
against the release without trusting the profile author.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

KINDS: tuple[str, ...] = ("verl", "vllm", "sglang", "megatron-core", "transformer-engine")
Kind = Literal["verl", "vllm", "sglang", "megatron-core", "transformer-engine"]

# A fact id is a dotted lower-case path: ``flag.kv_cache_dtype``, ``capability.online_block_fp8``,
# ``entrypoint``. The first component is the fact's category.
FACT_ID_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$"
FactId = Annotated[str, StringConstraints(pattern=FACT_ID_PATTERN, max_length=120)]
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$"
VersionStr = Annotated[str, StringConstraints(pattern=VERSION_PATTERN, max_length=40)]
Evidence = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)]


def _check_plain(value: Any, where: str = "value") -> None:
    """Reject anything but plain YAML data: null, bool, int, finite float, str, list, str-keyed map."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite float {value!r} is not plain data")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: map key {key!r} is not a string")
            _check_plain(item, f"{where}.{key}")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not plain YAML data")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Frozen):
    """The released artifact the facts were read from."""

    package: NonEmpty = Field(description='pip requirement that fetches it, e.g. "vllm==0.33.0".')
    artifact: NonEmpty = Field(description="File name of the wheel or sdist that was read.")
    sha256: Sha256 = Field(description="sha256 of that file (lower-case hex).")


class Fact(_Frozen):
    """One fact about a release: a plain-data value and where it was read."""

    value: Any = Field(description="Plain YAML data; null/false where the release lacks the feature.")
    evidence: Evidence = Field(description="file:line inside the release, or an upstream PR/issue URL.")

    @model_validator(mode="before")
    @classmethod
    def _require_value_key(cls, data: Any) -> Any:
        # ``value: null`` is meaningful (the release lacks the thing); a missing ``value`` is a typo.
        if isinstance(data, dict) and "value" not in data:
            raise ValueError("fact has no 'value' key (write 'value: null' if the release lacks it)")
        return data

    @field_validator("value")
    @classmethod
    def _plain(cls, value: Any) -> Any:
        _check_plain(value)
        return value


class Profile(_Frozen):
    """Everything fp8spec knows about one release of one backend."""

    kind: Kind
    version: VersionStr
    source: Source
    facts: dict[FactId, Fact] = Field(min_length=1)

    def has(self, fact_id: str) -> bool:
        """Whether the profile records ``fact_id`` (even with a null/false value)."""
        return fact_id in self.facts

    def fact(self, fact_id: str) -> Fact:
        try:
            return self.facts[fact_id]
        except KeyError:
            raise UnknownFact(self.kind, self.version, fact_id) from None

    def value(self, fact_id: str) -> Any:
        """The fact's value; a copy, so callers cannot change the cached profile."""
        return copy.deepcopy(self.fact(fact_id).value)

    def evidence(self, fact_id: str) -> str:
        return self.fact(fact_id).evidence

    def ids(self, prefix: str = "") -> list[str]:
        """Sorted fact ids, optionally only those starting with ``prefix`` (e.g. ``"flag."``)."""
        return sorted(k for k in self.facts if k.startswith(prefix))

    @property
    def label(self) -> str:
        return f"{self.kind} {self.version}"


class UnknownFact(KeyError):
    """The profile has no fact with that id."""

    def __init__(self, kind: str, version: str, fact_id: str):
        super().__init__(fact_id)
        self.kind, self.version, self.fact_id = kind, version, fact_id

    def __str__(self) -> str:
        return f"{self.kind} {self.version} profile has no fact {self.fact_id!r}"
