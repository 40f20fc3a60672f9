"""Asking a snapshot whether it confirms a fact a backend profile relies on.

A fact is ``Fact(kind, subject, value=None, present=True)``:

===========  =====================================================  ====================================
kind         subject                                                confirmed when
===========  =====================================================  ====================================
``field``    ``kv_cache_dtype`` or ``Class.field``                  the field exists (EngineArgs,
                                                                    ServerArgs, TransformerConfig, ...)
``flag``     ``--kv-cache-dtype``                                   argparse registers that spelling
                                                                    (and does not ignore its value)
``choice``   ``kv_cache_dtype`` / ``--kv-cache-dtype`` /            ``value`` is among the choices
             ``TransformerConfig.fp8_recipe``
``env``      ``VLLM_USE_DEEP_GEMM_E8M0``                            the package reads the variable
``default``  a field, an env var or a verl key                      its default equals ``value``
``key``      ``[config:]a.b.c`` (config defaults to ppo_trainer)    the path is in the composed tree
``new_key``  ``[config:]a.b.new``                                   ``+a.b.new=...`` composes (parent is
                                                                    a mapping, path absent)
``class``    ``Float8BlockScaling`` / ``QuantizationConfigArgs``    the class was extracted
===========  =====================================================  ====================================

``present=False`` asserts the opposite (e.g. vLLM 0.33.0 has no ``calculate_kv_scales`` field).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import core

KINDS = ("field", "flag", "choice", "env", "default", "key", "new_key", "class")
_MISSING = object()


@dataclass(frozen=True)
class Fact:
    kind: str
    subject: str
    value: Any = None
    present: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown fact kind {self.kind!r}; expected one of {KINDS}")

    @classmethod
    def coerce(cls, fact: "Fact | Mapping[str, Any]") -> "Fact":
        if isinstance(fact, Fact):
            return fact
        return cls(
            kind=fact["kind"],
            subject=fact["subject"],
            value=fact.get("value"),
            present=fact.get("present", True),
        )

    def describe(self) -> str:
        text = f"{self.kind} {self.subject}"
        if self.kind in ("choice", "default"):
            text += f" = {self.value!r}"
        return text if self.present else f"no {text}"


@dataclass
class FactResult:
    spec: str
    fact: Fact
    confirmed: bool
    detail: str = ""
    snapshot: str = ""


@dataclass
class Snapshot:
    """A loaded snapshot with lookups over its ``data``."""

    raw: dict[str, Any]
    path: Path | None = None
    _flag_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(
        cls, path_or_spec: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None
    ) -> "Snapshot":
        p = Path(path_or_spec)
        if not p.suffix == ".json":
            p = core.snapshot_path(str(path_or_spec), directory=directory)
        return cls(core.read_snapshot(p), p)

    @property
    def package(self) -> str:
        return self.raw["package"]

    @property
    def version(self) -> str:
        return self.raw["version"]

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def data(self) -> dict[str, Any]:
        return self.raw["data"]

    # -- fields -----------------------------------------------------------------------------------
    def _default_class(self) -> str | None:
        fields = self.data.get("fields") or {}
        for preferred in ("EngineArgs", "ServerArgs", "TransformerConfig"):
            if preferred in fields:
                return preferred
        return None

    def field(self, subject: str) -> dict[str, Any] | None:
        fields = self.data.get("fields") or {}
        if "." in subject:
            cls, name = subject.split(".", 1)
            table = fields.get(cls)
            if table is None:
                table = (self.data.get("config_classes") or {}).get(cls)
            return None if table is None else table.get(name)
        default = self._default_class()
        return None if default is None else fields[default].get(subject)

    def has_class(self, name: str) -> bool:
        return any(name in (self.data.get(k) or {}) for k in ("fields", "config_classes", "recipes", "enums"))

    # -- flags ------------------------------------------------------------------------------------
    def flag(self, spelling: str) -> dict[str, Any] | None:
        flags = self.data.get("flags") or {}
        if spelling in flags:
            return flags[spelling]
        parser = self.data.get("parser") or {}
        if parser.get("underscore_spelling_accepted") and spelling.startswith("--"):
            return flags.get("--" + spelling[2:].replace("_", "-"))
        return None

    def choices(self, subject: str) -> list[Any] | None:
        choices = self.data.get("choices") or {}
        if subject in choices:
            return choices[subject]
        if subject.startswith("-"):
            info = self.flag(subject)
            return None if info is None else info.get("choices")
        f = self.field(subject)
        if f is not None and "choices" in f:
            return f["choices"]
        for info in (self.data.get("flags") or {}).values():
            if info.get("dest") == subject and "choices" in info:
                return info["choices"]
        return None

    # -- env ----------------------------------------------------------------------------------------
    def env(self, name: str) -> dict[str, Any] | None:
        return (self.data.get("env") or {}).get(name)

    # -- verl config tree ---------------------------------------------------------------------------
    def _config(self, subject: str) -> tuple[dict[str, Any], str]:
        configs = self.data.get("configs") or {}
        if not configs:
            raise KeyError(f"{self.spec} has no composed config trees")
        if ":" in subject:
            name, path = subject.split(":", 1)
        else:
            name, path = "ppo_trainer", subject
        if name not in configs:
            raise KeyError(f"{self.spec} has no config {name!r}; known: {sorted(configs)}")
        return configs[name], path

    def key(self, subject: str) -> Any:
        """The raw value at a config path (a mapping path returns ``{}``-like marker); ``_MISSING`` if absent."""
        cfg, path = self._config(subject)
        if path in cfg["keys"]:
            return cfg["keys"][path]
        if path in cfg["mappings"]:
            return {"__mapping__": True}
        return _MISSING

    def can_add(self, subject: str) -> bool:
        cfg, path = self._config(subject)
        if path in cfg["keys"] or path in cfg["mappings"]:
            return False
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        return parent == "" or parent in cfg["mappings"]

    # -- facts ----------------------------------------------------------------------------------------
    def confirm(self, fact: Fact | Mapping[str, Any]) -> tuple[bool, str]:
        fact = Fact.coerce(fact)
        holds, detail = self._holds(fact)
        if fact.present:
            return holds, detail
        return (not holds), detail

    def _holds(self, fact: Fact) -> tuple[bool, str]:
        k, s = fact.kind, fact.subject
        if k == "field":
            f = self.field(s)
            return f is not None, "field exists" if f is not None else "no such field"
        if k == "flag":
            info = self.flag(s)
            if info is None:
                return False, "argparse does not register this spelling"
            if info.get("ignored"):
                return False, f"registered but ignored (action {info.get('action')})"
            return True, f"dest {info.get('dest')}" + (" (deprecated)" if info.get("deprecated") else "")
        if k == "choice":
            vals = self.choices(s)
            if vals is None:
                return False, "no choice list for this subject"
            return fact.value in vals, f"choices: {vals}"
        if k == "env":
            e = self.env(s)
            return e is not None, "read by the package" if e is not None else "not read (not declared)"
        if k == "class":
            return self.has_class(s), ""
        if k == "key":
            try:
                v = self.key(s)
            except KeyError as e:
                return False, str(e)
            return v is not _MISSING, "" if v is not _MISSING else "not in the composed tree"
        if k == "new_key":
            try:
                ok = self.can_add(s)
            except KeyError as e:
                return False, str(e)
            return ok, "parent is a mapping, key absent" if ok else "key exists or parent is not a mapping"
        if k == "default":
            actual = self._default(s)
            if actual is _MISSING:
                return False, "no literal default recorded"
            return actual == fact.value, f"default is {actual!r}"
        raise ValueError(k)

    def _default(self, subject: str) -> Any:
        if self.data.get("configs"):
            try:
                v = self.key(subject)
            except KeyError:
                v = _MISSING
            return v
        e = self.env(subject)
        if e is not None:
            for key in ("default_value", "raw_default"):
                if key in e:
                    return e[key]
            if e.get("defaults"):
                return e["defaults"][0]
            return _MISSING
        f = self.field(subject)
        if f is not None and "default_value" in f:
            return f["default_value"]
        return _MISSING


def check(
    facts: Mapping[str, Iterable[Fact | Mapping[str, Any]]],
    directory: str | os.PathLike[str] | None = None,
) -> list[FactResult]:
    """Confirm each fact against the snapshot of its spec.

    ``facts`` maps ``"vllm==0.33.0"`` (or ``"megatron_core==0.16.1"``) to the facts a profile relies on.
    A missing snapshot makes every fact of that spec unconfirmed (detail says why)."""
    results: list[FactResult] = []
    for spec, items in facts.items():
        path = core.snapshot_path(spec, directory=directory)
        snap = Snapshot.load(path) if path.is_file() else None
        for item in items:
            fact = Fact.coerce(item)
            if snap is None:
                results.append(FactResult(spec, fact, False, f"no snapshot at {path}", str(path)))
                continue
            ok, detail = snap.confirm(fact)
            results.append(FactResult(spec, fact, ok, detail, str(path)))
    return results


def load(path_or_spec: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None) -> Snapshot:
    return Snapshot.load(path_or_spec, directory)


def check_source(
    spec: str,
    artifact: str | None = None,
    sha256: str | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Compare a profile's ``source`` (artifact file name, sha256) with the snapshot of ``spec``.

    Returns problems (empty when the snapshot was extracted from the same file the profile cites)."""
    path = core.snapshot_path(spec, directory=directory)
    if not path.is_file():
        return [f"no snapshot for {spec} at {path}; run refresh({spec!r})"]
    return compare_source(spec, core.read_snapshot(path)["artifact"], artifact, sha256)


def compare_source(
    spec: str, art: Mapping[str, Any], artifact: str | None = None, sha256: str | None = None
) -> list[str]:
    """:func:`check_source` on a snapshot's (checked) ``artifact`` entry."""
    problems = []
    if artifact is not None and artifact != art["filename"]:
        problems.append(f"{spec}: profile cites {artifact}, snapshot was read from {art['filename']}")
    if sha256 is not None and sha256 != art["sha256"]:
        problems.append(f"{spec}: profile sha256 {sha256} != snapshot sha256 {art['sha256']}")
    return problems
