"""What a bundle hands to ``execve`` must fit Linux's limit on one argument (``backends/linux/limits.yaml``).

A word over it is not refused by any tool before the launch: ``sh -c`` (the RayJob entrypoint) or ``exec
python3 ...`` (launch.sh, serve.sh) then fails with E2BIG, "Argument list too long", on the cluster. So every
argument a launcher builds from spec values is measured at compile, and the KubeRay entrypoint, one argument
of ``sh -c`` for the whole command line, carries no spec value (its overrides go in a script in the ConfigMap).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from ruamel.yaml import YAML

from fp8spec.launchers.base import BundleError
from fp8spec.resources import data_dir


@lru_cache(maxsize=None)
def max_arg_bytes() -> int:
    """The longest argument ``execve`` takes, in bytes, its terminating NUL included."""
    with open(data_dir("backends") / "linux" / "limits.yaml", encoding="utf-8") as fh:
        return int(YAML(typ="safe", pure=True).load(fh)["max_arg_strlen"]["value"])


def check_arguments(where: str, words: Iterable[str]) -> None:
    """BundleError naming the first word of ``words`` (one program's arguments) over the limit."""
    limit = max_arg_bytes()
    for i, word in enumerate(words):
        size = len(word.encode("utf-8", "surrogateescape")) + 1
        if size > limit:
            head = word[:60] + ("..." if len(word) > 60 else "")
            raise BundleError(
                f"{where}: argument {i} ({head!r}) would be {size} bytes and Linux refuses one argument over "
                f"{limit} (MAX_ARG_STRLEN, backends/linux/limits.yaml): the program could not start; make the "
                "spec value it comes from shorter"
            )
