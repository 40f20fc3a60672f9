"""Typed model of one backend profile: what one release of one backend is known to accept and do.

A profile is data (``backends/<kind>/<version>.yaml``); this module only says what a well-formed
profile looks like.  Every fact carries the evidence it was read from, so a reviewer can check it
against the release without trusting the profile author.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from fp8spec.targets import KINDS


def _known_kind(value: str) -> str:
    if value not in KINDS:
        raise ValueError(f"unknown backend kind {value!r}; known: {', '.join(KINDS)}")
    return value


Kind = Annotated[str, AfterValidator(_known_kind)]

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


def _plain_value(value: Any) -> Any:
    _check_plain(value)
    return value


PlainValue = Annotated[Any, AfterValidator(_plain_value)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Frozen):
    """The released artifact the facts were read from."""

    package: NonEmpty = Field(description='pip requirement that fetches it, e.g. "vllm==0.33.0".')
    artifact: NonEmpty = Field(description="File name of the wheel or sdist that was read.")
    sha256: Sha256 = Field(description="sha256 of that file (lower-case hex).")


#: How a schema snapshot (backends/snapshots, fp8spec.snapshots) confirms a fact. The first eight are the
#: snapshot query kinds (fp8spec.snapshots.query); ``choices`` is a profile shorthand: every item of the
#: fact's list value (or of ``value`` when given) is among the snapshot's choices for ``subject``.
ConfirmKind = Literal["field", "flag", "choice", "choices", "env", "default", "key", "new_key", "class"]
_NEEDS_VALUE = ("choice", "default")
SnapshotSpec = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!_-]*$")
]


class Confirm(_Frozen):
    """One check a snapshot can make of a fact, e.g. ``{kind: flag, subject: "--kv-cache-dtype"}``."""

    kind: ConfirmKind
    subject: NonEmpty = Field(
        description="Flag spelling, field ([Class.]name), env var, verl key ([config:]path)."
    )
    value: PlainValue = Field(
        default=None, description="The choice or default value (kind choice/default/choices)."
    )
    present: bool = Field(
        default=True, description="false: the snapshot must NOT have it (a removed feature)."
    )
    snapshot: Optional[SnapshotSpec] = Field(
        default=None,
        description='Another release\'s snapshot, e.g. "megatron-core==0.16.1"; default: this one.',
    )

    @model_validator(mode="before")
    @classmethod
    def _value_rules(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = data.get("kind")
            if kind in _NEEDS_VALUE and "value" not in data:
                raise ValueError(f"a {kind!r} confirmation needs 'value' (write 'value: null' for null)")
            if kind not in _NEEDS_VALUE + ("choices",) and "value" in data:
                raise ValueError(f"a {kind!r} confirmation takes no 'value'")
            if kind == "choices" and "value" in data and not isinstance(data["value"], list):
                raise ValueError("'choices' takes a list 'value' (or none: the fact's own list value)")
        return data

    def describe(self) -> str:
        text = f"{self.kind} {self.subject}"
        if self.kind in _NEEDS_VALUE:
            text += f" = {self.value!r}"
        if not self.present:
            text = "no " + text
        return text + (f" [{self.snapshot}]" if self.snapshot else "")


class Fact(_Frozen):
    """One fact about a release: a plain-data value, where it was read, and (optionally) how a schema
    snapshot of the release confirms it. Facts without ``confirm`` are evidence-only (behaviour read from
    code paths, or upstream statements)."""

    value: PlainValue = Field(description="Plain YAML data; null/false where the release lacks the feature.")
    evidence: Evidence = Field(description="file:line inside the release, or an upstream PR/issue URL.")
    confirm: Optional[Annotated[tuple[Confirm, ...], Field(min_length=1)]] = Field(
        default=None, description="How a snapshot confirms the fact; omit for evidence-only facts."
    )

    @model_validator(mode="after")
    def _choices_need_a_list(self) -> "Fact":
        for c in self.confirm or ():
            if c.kind == "choices" and c.value is None and not isinstance(self.value, list):
                raise ValueError(
                    "a 'choices' confirmation without 'value' needs the fact's value to be a list"
                )
        return self

    @model_validator(mode="before")
    @classmethod
    def _require_value_key(cls, data: Any) -> Any:
        # ``value: null`` is meaningful (the release lacks the thing); a missing ``value`` is a typo.
        if isinstance(data, dict) and "value" not in data:
            raise ValueError("fact has no 'value' key (write 'value: null' if the release lacks it)")
        if isinstance(data, dict) and "confirm" in data and not data["confirm"]:
            raise ValueError("'confirm' is empty: list at least one clause, or drop the key (evidence only)")
        return data


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

    def confirmable(self) -> list[str]:
        """Ids of the facts a schema snapshot can confirm (they carry ``confirm`` clauses), in file order."""
        return [k for k, f in self.facts.items() if f.confirm]

    def evidence_only(self) -> list[str]:
        """Ids of the facts backed by evidence alone (behaviour read from code paths, upstream statements)."""
        return [k for k, f in self.facts.items() if not f.confirm]

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
