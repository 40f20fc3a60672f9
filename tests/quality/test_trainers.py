"""verl's trainers are a registry like the engines (fp8spec/trainers/): descriptors hold names and capabilities as
data, and no module outside fp8spec/trainers/ compares ``training.backend`` (or a backend's trainer prefix) with a
trainer's name: rules, planner and compiler ask the trainer object.

fp8spec/runtime/ is left out: it ships inside bundles, imports nothing else from fp8spec, and reads verl's own
config values (verl's strategy names), not the spec's.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

from fp8spec.trainers import UnknownTrainer, all_trainers, get_trainer, trainer_names
from fp8spec.trainers.base import Trainer
from tests.conftest import REPO
from tests.quality.scratch import scratch_source

PACKAGE = REPO / "fp8spec"
# an expression that is a trainer's name: spec.training.backend, t.backend, choice.trainer, trainer
TRAINER_REFERENCE = re.compile(r"(\btraining\.backend|\bt\.backend|\btrainer)$")


def _string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def trainer_name_comparisons(path: Path, trainers: tuple[str, ...]) -> list[str]:
    """``==`` / ``!=`` / ``in`` with a trainer's name on one side or a trainer reference against a string, and
    ``.startswith("<trainer>+")`` on a backend name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}"
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(isinstance(s, ast.Constant) and s.value in trainers for s in sides)
            referenced = any(
                TRAINER_REFERENCE.search(ast.unparse(s)) for s in sides if not isinstance(s, ast.Constant)
            ) and any(isinstance(s, (ast.Tuple, ast.List, ast.Set)) or _string(s) for s in sides)
            if named or referenced:
                out.append(where)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            prefixes = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if any(p.startswith(f"{t}+") for p in prefixes for t in trainers):
                out.append(where)
    return out


# Comparisons allowed outside the trainers' folder: none (rules, planner and compiler ask the capabilities).
ALLOWED: dict[str, int] = {}


def test_no_trainer_name_is_compared_outside_the_trainers_folder():
    folders = {PACKAGE / "trainers", PACKAGE / "runtime"}
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if not any(f in path.parents for f in folders):
            for hit in trainer_name_comparisons(path, trainer_names()):
                found.setdefault(str(path.relative_to(REPO)), []).append(hit)
    assert {p: len(h) for p, h in found.items()} == ALLOWED, "\n".join(
        h for p, hits in found.items() for h in hits if p not in ALLOWED
    )


def test_the_trainer_comparison_check_has_teeth(tmp_path):
    with scratch_source(
        tmp_path,
        "if spec.training.backend == 'x': pass\nif choice.trainer != 'y': pass\nif other == 'fsdp': pass\n"
        "if launch.backend.startswith('fsdp+'): pass\nif t.backend in ('x', 'y'): pass\n"
        "if s.layer == 'trainer_arg': pass\nif trainer.parallel_layout: pass\nif choice.trainer is None: pass\n",
    ) as bad:
        assert len(trainer_name_comparisons(bad, ("fsdp",))) == 5


def test_every_trainer_folder_is_registered():
    folders = {m.name for m in pkgutil.iter_modules([str(PACKAGE / "trainers")]) if m.ispkg}
    assert set(trainer_names()) == folders
    assert [t.name for t in all_trainers()] == list(trainer_names())
    assert all(isinstance(t, Trainer) and t.label for t in all_trainers())


def test_an_unknown_trainer_is_a_lookup_error_naming_the_known_ones():
    with pytest.raises(UnknownTrainer, match=r"'deepspeed'.*fsdp, megatron"):
        get_trainer("deepspeed")


def test_capabilities_are_data_on_the_descriptor():
    """The spec's rules read these; each names a difference verl's trainers really have."""
    fsdp, megatron = get_trainer("fsdp"), get_trainer("megatron")
    assert (fsdp.parallel_layout, megatron.parallel_layout) == (False, True)
    assert (fsdp.fp8_training, megatron.fp8_training) == (False, True)
    assert (fsdp.hf_model, megatron.hf_model) == (True, False)
    assert fsdp.stack_fields == () and set(megatron.stack_fields) == {"megatron_core", "transformer_engine"}
    assert megatron.settings_adapter and not fsdp.settings_adapter
