"""The spec's field types (bounded numbers, checked text, paths) and the strict base of every section."""

from __future__ import annotations

import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator

from fp8spec.specfile.text import check_value

# Bounds keep absurd numbers (1e400, 2**80 GPUs) out of the arithmetic the rules do.
PositiveCount = Annotated[int, Field(ge=1, le=1_000_000)]
SmallCount = Annotated[int, Field(ge=1, le=4096)]
NonNegLayers = Annotated[int, Field(ge=0, le=10_000)]
Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$", max_length=40)]
CudaVersion = Annotated[str, StringConstraints(pattern=r"^[0-9]{2}\.[0-9]{1,2}$")]


# Values flow into Hydra overrides, shell and YAML: fp8spec.specfile.text says which characters are refused
# (controls, line separators, bidi and other invisible characters) and why; no OmegaConf interpolation.
plain_text = check_value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is blank (only whitespace); write the value or leave the field out")
    return value


NonEmpty = Annotated[
    str,
    StringConstraints(min_length=1, max_length=4096),
    AfterValidator(plain_text),
    AfterValidator(_not_blank),
]


def _path_like(value: str) -> str:
    # Paths and addresses end up as command-line arguments (vllm serve PATH, cd DIR, ray job submit
    # --address ADDR) and YAML values: a leading '-' turns one into an option ('-h', '--trust-remote-code',
    # cd -P), and blanks at either end are never part of a real path, only of a copy-paste.
    if value.startswith("-"):
        raise ValueError(
            f"must not start with '-': {value!r} would be read as an option on a command line "
            "(a file named so: write ./" + value + ")"
        )
    if value != value.strip():
        raise ValueError("has blanks at its start or end")
    return value


# Every path or address field: NonEmpty, no leading '-', no surrounding blanks.
PathText = Annotated[NonEmpty, AfterValidator(_path_like)]


def _absolute(value: str) -> str:
    # Ray workers run in a temporary working_dir on every node: a relative folder would land there and vanish.
    if not value.startswith("/"):
        raise ValueError("must be an absolute path (start with '/') on storage every node shares")
    return value


AbsolutePath = Annotated[PathText, AfterValidator(_absolute)]
# Names verl looks up in its registries (loggers, reward managers): checked against the verl profile by rules.
RegistryName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
PythonName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
LayerCount = Annotated[int, Field(ge=1, le=10_000)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, ge=-1e9, le=1e9)]


def exactly_int(value: Any) -> Any:
    # Literal[1] alone would take True and 1.0 (they compare equal to 1).
    if type(value) is not int:
        raise ValueError(f"must be the integer 1, not {type(value).__name__} {value!r}")
    return value


def _strings_in(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_in(key)
            yield from _strings_in(item)


def _is_tuple(annotation: Any) -> bool:
    return typing.get_origin(annotation) is tuple or any(_is_tuple(a) for a in typing.get_args(annotation))


class Section(BaseModel):
    """Every section is strict (no bool for a number, no text for a number, no number for text, booleans only
    true/false) and every string in it, in any field added later too, follows fp8spec.specfile.text's rule."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _lists_as_tuples(cls, value: Any, info) -> Any:
        # YAML has lists, not tuples; strict mode would refuse a list for a fixed-length tuple field.
        if isinstance(value, list) and _is_tuple(cls.model_fields[info.field_name].annotation):
            return tuple(value)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _text_rule(cls, value: Any) -> Any:
        # The typed aliases (NonEmpty, ...) check their own strings with item-level locations; this catches a
        # string in any field that does not use them.
        for text in _strings_in(value):
            check_value(text)
        return value


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field's annotation holds (directly, or inside Optional/Union/list), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None


def either(choices: list[str] | tuple[str, ...]) -> str:
    """Choices as a field description says them: 'a or b', 'a, b or c'."""
    return " or ".join([", ".join(choices[:-1]), choices[-1]] if len(choices) > 1 else list(choices))


def how_many(n: int) -> str:
    """'both', 'three', ...: how a description counts a handful."""
    return {2: "both", 3: "three", 4: "four", 5: "five", 6: "six"}.get(n, str(n))
