"""The custom reward function file: read once, offline, so validation and the bundle see the same bytes.

The file is copied into the bundle under a fixed name and verl loads it relative to the Ray working_dir
(the bundle folder), so the bundle runs without the user's tree on the cluster.
"""

from __future__ import annotations

import ast
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fp8spec.specfile.model import Spec

BUNDLE_NAME = "custom_reward.py"
MAX_BYTES = 1 << 20  # a reward function, not a package: 1 MiB is plenty and keeps the bundle small


@dataclass(frozen=True)
class RewardFile:
    source: Path  # where it was read on this machine
    text: str
    function: str


@dataclass(frozen=True)
class RewardFileProblem:
    message: str
    path: str  # the spec field to point at


def load_reward_file(spec: Spec, spec_dir: Path) -> tuple[Optional[RewardFile], Optional[RewardFileProblem]]:
    custom = spec.reward.custom_function
    if custom is None:
        return None, None
    where = "reward.custom_function.path"
    path = Path(custom.path).expanduser()
    if not path.is_absolute():
        path = spec_dir / path
    if path.suffix != ".py":
        return None, RewardFileProblem(f"{custom.path} is not a Python file (.py)", where)
    try:
        info = os.stat(path)
    except OSError as err:
        return None, RewardFileProblem(f"cannot read {path}: {err.strerror or err}", where)
    if not stat.S_ISREG(info.st_mode):
        return None, RewardFileProblem(f"{path} is not a regular file", where)
    if info.st_size > MAX_BYTES:
        return None, RewardFileProblem(
            f"{path} is {info.st_size} bytes; a reward file may hold at most {MAX_BYTES} bytes", where
        )
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
        text = raw.decode("utf-8")
    except OSError as err:
        return None, RewardFileProblem(f"cannot read {path}: {err.strerror or err}", where)
    except UnicodeDecodeError as err:
        return None, RewardFileProblem(f"{path} is not UTF-8 text (byte {err.start})", where)
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as err:
        return None, RewardFileProblem(f"{path}:{err.lineno}: Python syntax error: {err.msg}", where)
    if custom.name not in _top_level_names(tree):
        return None, RewardFileProblem(
            f"{path} defines no top-level {custom.name!r} for verl to load", "reward.custom_function.name"
        )
    return RewardFile(path, text, custom.name), None


def _top_level_names(tree: ast.Module) -> set[str]:
    # verl does getattr(module, name) after executing the file: any module-level binding counts.
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
