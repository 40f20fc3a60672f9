"""sbatch's long-option table (``backends/slurm/sbatch-<version>.yaml``) and how sbatch matches an option.

sbatch hands ``#SBATCH`` lines to getopt_long, which takes any unique prefix of a long option (``--node=4`` is
``--nodes=4``): an extra option is judged by the option sbatch would read, never by its spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator
from ruamel.yaml import YAML

from fp8spec.resources import data_dir

SBATCH_VERSION = "26.05.3"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SbatchOption(_Frozen):
    argument: Literal["none", "required", "optional"]
    val: str = Field(description="getopt val: options with the same val are the same option.")
    evidence: str = Field(min_length=1)


class Matching(_Frozen):
    value: Literal["getopt_long"]
    evidence: str = Field(min_length=1)


class SbatchSource(_Frozen):
    repository: str
    tag: str
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")


class TimeFormat(_Frozen):
    """What sbatch accepts for --time (parse_time.c _is_valid_timespec and time_str2secs)."""

    unlimited: list[str]
    characters: str
    max_dashes: int
    max_colons: int
    min_digit_groups: dict[Literal["days", "plain"], dict[str, int]]
    evidence: str = Field(min_length=1)


class SbatchTable(_Frozen):
    """sbatch's options in table order (getopt_long's order), and the spec's policy for each."""

    program: Literal["sbatch"]
    version: str
    source: SbatchSource
    matching: Matching
    time_format: TimeFormat
    options: dict[str, SbatchOption]
    written_by_launcher: dict[str, str]
    # written by slurm.sbatch before cluster.slurm.extra_sbatch, which may name the option again to choose otherwise
    launcher_defaults: dict[str, str] = {}
    refused: dict[str, str]
    allowed: list[str]

    @model_validator(mode="after")
    def _every_option_judged_once(self) -> "SbatchTable":
        groups = (set(self.written_by_launcher), set(self.refused), set(self.allowed))
        judged = set().union(*groups)
        problems = []
        if judged != set(self.options):
            problems.append(
                f"judged but not in the table: {sorted(judged - set(self.options))}; "
                f"in the table but not judged: {sorted(set(self.options) - judged)}"
            )
        if sum(len(g) for g in groups) != len(judged) or len(self.allowed) != len(set(self.allowed)):
            problems.append("an option is listed twice")
        if not set(self.launcher_defaults) <= set(self.allowed):
            problems.append(
                f"launcher defaults not allowed to the user: {sorted(set(self.launcher_defaults) - set(self.allowed))}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass(frozen=True)
class Resolution:
    """What sbatch makes of ``--text``: one option (exactly or by prefix), several (ambiguous) or none."""

    text: str
    options: tuple[str, ...]
    exact: bool = False

    @property
    def option(self) -> Optional[str]:
        return self.options[0] if len(self.options) == 1 else None


@lru_cache(maxsize=None)
def load_sbatch(version: str = SBATCH_VERSION) -> SbatchTable:
    path = data_dir("backends") / "slurm" / f"sbatch-{version}.yaml"
    with open(path, encoding="utf-8") as fh:
        return SbatchTable.model_validate(YAML(typ="safe", pure=True).load(fh))


def resolve(name: str, table: Optional[SbatchTable] = None) -> Resolution:
    """glibc getopt_long's long-option lookup (posix/getopt.c, process_long_option) over sbatch's table."""
    table = table or load_sbatch()
    if name in table.options:
        return Resolution(name, (name,), exact=True)
    candidates = [o for o in table.options if o.startswith(name)] if name else []
    if not candidates:
        return Resolution(name, ())
    first = table.options[candidates[0]]
    if all(
        (table.options[c].argument, table.options[c].val) == (first.argument, first.val) for c in candidates
    ):
        return Resolution(name, (candidates[0],))
    return Resolution(name, tuple(candidates))


def judge(option: str, table: Optional[SbatchTable] = None) -> Optional[tuple[str, str]]:
    """(problem, fix) for one ``--name[=value]`` extra option, or None when sbatch would take it as a job
    option the launcher leaves alone."""
    table = table or load_sbatch()
    name, equals, _ = option.removeprefix("--").partition("=")
    has_value = bool(equals)
    found = resolve(name, table)
    where = f"sbatch {table.version}"
    if not found.options:
        return f"{where} has no option --{name}", "see `man sbatch` for the options"
    if found.option is None:
        shown = ", ".join(f"--{o}" for o in found.options)
        return f"--{name} is ambiguous for {where} (it could be {shown})", "write the option's full name"
    full = found.option
    meaning = "" if found.exact else f" (sbatch reads it as --{full}, the only option it begins)"
    if full in table.written_by_launcher:
        why = table.written_by_launcher[full]
        field = why.removeprefix("from ")
        fix = f"remove it; set {field} instead" if field != why else "remove it"
        return f"--{name}{meaning} is written by slurm.sbatch itself ({why})", fix
    if full in table.refused:
        return f"--{name}{meaning} is not allowed: {table.refused[full]}", "remove it"
    if not found.exact:
        return f"--{name} is an abbreviation of --{full}", f"write --{full} in full"
    argument = table.options[full].argument
    if argument == "none" and has_value:
        return f"--{full} takes no value", f"write --{full} alone"
    if argument == "required" and not has_value:
        # sbatch would take the next #SBATCH word as its value.
        return f"--{full} needs a value", f"write --{full}=VALUE"
    return None


def time_problem(text: str, table: Optional[SbatchTable] = None) -> Optional[str]:
    """Why sbatch would refuse ``--time=text`` ("Invalid --time specification"), or None: Slurm's own
    _is_valid_timespec over the facts in the sbatch table."""
    fmt = (table or load_sbatch()).time_format
    if text.upper() in {u.upper() for u in fmt.unlimited}:
        return None
    if not text or any(c not in fmt.characters for c in text):
        return f"only digits, '-' and ':' (or {', '.join(fmt.unlimited)})"
    groups = len([g for g in text.replace("-", ":").split(":") if g])
    dashes, colons = text.count("-"), text.count(":")
    if not groups:
        return "no number in it"
    if dashes > fmt.max_dashes or colons > fmt.max_colons:
        return f"at most {fmt.max_dashes} '-' and {fmt.max_colons} ':'"
    if dashes and ":" in text.split("-", 1)[0]:
        return "the days come first: days-hours:minutes:seconds"
    need = fmt.min_digit_groups["days" if dashes else "plain"].get(str(colons), 0)
    if groups < need:
        return "a part is missing a number"
    return None
