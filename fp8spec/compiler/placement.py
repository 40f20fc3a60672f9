"""Checks that need to know where the bundle is written: paths in the spec that count from the bundle folder.

``cluster.working_dir`` is relative to the bundle folder (submit.sh and launch.sh ``cd`` there and then into
it), so only here, with the folder known, can it be resolved as they will: ``../../..`` is ``/`` from a
bundle three folders deep, whatever it looks like as text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from fp8spec.specfile.model import Spec
from fp8spec.specfile.paths import PathError, is_root, resolved


def working_dir_problem(spec: Spec, bundle_dir: str | os.PathLike[str]) -> Optional[tuple[str, str]]:
    """(field, message) when the spec's working_dir, seen from ``bundle_dir``, is the root folder."""
    value = spec.cluster.working_dir
    try:
        folder = resolved(value, Path(bundle_dir).absolute())
    except PathError as err:
        return "cluster.working_dir", str(err)
    if is_root(folder):
        return (
            "cluster.working_dir",
            f"{value!r} is the root folder '/' seen from the bundle folder {bundle_dir}: Ray would upload "
            "the whole file system as the job's working_dir; name the folder that holds the bundle",
        )
    return None
