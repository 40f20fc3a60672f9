"""The paths the training job opens on the cluster, read from the spec's path fields.

Every spec field typed as a path (fp8spec.specfile.fields.PathText) is either a path the job opens on its nodes
or is named in ``NOT_OPENED_BY_JOB`` with the reason; a new path field is therefore checked by the launch rules
(CLU002, CLU003) from the day it is added, unless someone says why it need not be.
"""

from __future__ import annotations

import posixpath
import re
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from pydantic import BaseModel

from fp8spec.specfile.fields import _path_like
from fp8spec.specfile.paths import lexical

if TYPE_CHECKING:
    from fp8spec.specfile.model import Spec

# Path fields the job itself never opens on the cluster.
NOT_OPENED_BY_JOB = {
    "model.config_path": "read by fp8spec where it runs, never by the job",
    "reward.custom_function.path": "copied into the bundle; verl loads the copy from the Ray working_dir",
    "cluster.address": "the Ray dashboard address the submit script talks to, not a file",
    "cluster.working_dir": "a folder inside the bundle, which every launcher ships to the job",
    "cluster.kuberay.image": "a container image name, not a file",
}
# Path fields the job writes: no image can hold them for later, they must be on storage that outlives the pods.
WRITTEN = {"trainer.checkpoint_dir"}

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class JobPath:
    field: str  # the dotted spec path the finding points at (a list item carries its index)
    path: str
    writes: bool


def _is_path_type(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        if any(getattr(m, "func", None) is _path_like for m in annotation.__metadata__):
            return True
        return _is_path_type(typing.get_args(annotation)[0])
    return any(_is_path_type(a) for a in typing.get_args(annotation))


def _sections(annotation: Any) -> list[type[BaseModel]]:
    return [
        a
        for a in (annotation, *typing.get_args(annotation))
        if isinstance(a, type) and issubclass(a, BaseModel)
    ]


def path_fields(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """The dotted names of every path-typed field of the spec format."""
    for name, info in model.model_fields.items():
        dotted = prefix + name
        if any(getattr(m, "func", None) is _path_like for m in info.metadata) or _is_path_type(
            info.annotation
        ):
            yield dotted
        for section in _sections(info.annotation):
            yield from path_fields(section, dotted + ".")


def _value(spec: Spec, dotted: str) -> Any:
    value: Any = spec
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def job_paths(spec: Spec) -> list[JobPath]:
    """Every absolute file-system path the job reads or writes on its nodes, in the spec format's field order
    (hub ids and URLs are not files; a relative path is resolved inside the job's working_dir)."""
    out = []
    for dotted in path_fields(type(spec)):
        if dotted in NOT_OPENED_BY_JOB:
            continue
        if dotted == "model.path" and spec.model.from_hub:
            continue
        value = _value(spec, dotted)
        values = (
            [(dotted, value)]
            if isinstance(value, str)
            else [(f"{dotted}.{i}", v) for i, v in enumerate(value or [])]
        )
        for field, path in values:
            if _URL.match(path) or not posixpath.isabs(path):
                continue
            out.append(JobPath(field, path, dotted in WRITTEN))
    return out


def under(path: str, mounts: list[str]) -> bool:
    """Whether ``path`` lies in one of the ``mounts`` folders (normalised: /data/../etc is not under /data)."""
    path = lexical(path)
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in map(lexical, mounts))
