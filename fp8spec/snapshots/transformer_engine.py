"""Static (ast-only) extractor for TransformerEngine's Python package (the ``transformer-engine``
py3-none-any wheel carries ``transformer_engine/common/recipe/__init__.py`` and
``transformer_engine/pytorch/quantization.py``; the CUDA libraries are in other artifacts).

Records the ``Format`` enum members, every recipe class (subclasses of ``Recipe``) with its dataclass
fields (annotation, default, literal default, the environment variable a default reads) and its
un-annotated class attributes (``fp8_quant_fwd_inp = QParams(...)``: evaluated once at import time, not
constructor arguments), ``QParams``/``MMParams`` fields, every ``NVTE_*`` variable the two files read,
and the source of the hardware-support predicates (what cannot be checked without a GPU).
"""

from __future__ import annotations

import ast
from typing import Any

from . import _ast
from .artifacts import Artifact

EXTRACTOR_VERSION = 1

RECIPE = "transformer_engine/common/recipe/__init__.py"
QUANTIZATION = "transformer_engine/pytorch/quantization.py"


def extract(art: Artifact) -> dict[str, Any]:
    tree = art.tree(RECIPE)
    classes = {c.name: c for c in _ast.classes(tree)}
    recipes: dict[str, Any] = {}
    params: dict[str, Any] = {}
    for name, cls in sorted(classes.items()):
        if _is_recipe(name, classes) and name != "Recipe":
            recipes[name] = _class_entry(cls)
        elif name in ("QParams", "MMParams"):
            params[name] = _class_entry(cls)
    fmt = classes.get("Format")
    formats = {}
    if fmt is not None:
        for stmt in fmt.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                formats[stmt.targets[0].id] = _ast.unparse(stmt.value)
    env: dict[str, Any] = {}
    _collect_env(tree, RECIPE, env, classes)
    support: dict[str, str] = {}
    sources = [RECIPE]
    if art.has(QUANTIZATION):
        qtree = art.tree(QUANTIZATION)
        sources.append(QUANTIZATION)
        _collect_env(qtree, QUANTIZATION, env, {})
        for node in qtree.body:
            if (
                isinstance(node, ast.FunctionDef)
                and node.name.startswith("_compute_")
                and node.name.endswith("_support")
            ):
                body = [
                    s
                    for s in node.body
                    if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                ]
                support[node.name] = "\n".join(_ast.unparse(s) for s in body)
    return {
        "sources": sources,
        "formats": formats,
        "recipes": recipes,
        "fields": {name: entry["fields"] for name, entry in {**recipes, **params}.items()},
        "params": params,
        "env": env,
        "hardware_support_checks": support,
        "not_checkable_without_cuda": [
            "recipe support on the actual GPU (the _compute_*_support predicates need a device and torch.version.cuda)",
            "kernel availability and numerics (libtransformer_engine.so, transformer_engine_torch)",
            "class attributes such as Float8BlockScaling.fp8_quant_fwd_inp are fixed at import time from NVTE_* "
            "environment variables; constructor arguments of the same name are ignored",
        ],
    }


def _is_recipe(name: str, classes: dict[str, ast.ClassDef], depth: int = 0) -> bool:
    if name == "Recipe":
        return True
    cls = classes.get(name)
    if cls is None or depth > 10:
        return False
    return any(_is_recipe(b, classes, depth + 1) for b in _ast.base_names(cls))


def _class_entry(cls: ast.ClassDef) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in _ast.class_fields(cls):
        entry = _ast.public(f)
        node = f.get("_default_node")
        if node is not None:
            envs = [name for name, _d, _c in _ast.getenv_calls(node)]
            if envs:
                entry["env"] = sorted(set(envs))
        fields[f["name"]] = entry
    attrs: dict[str, Any] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if stmt.targets[0].id.startswith("_"):
                continue
            attrs[stmt.targets[0].id] = _ast.unparse(stmt.value)
    return {"bases": _ast.base_names(cls), "fields": fields, "class_attributes": attrs}


def _collect_env(
    tree: ast.Module, member: str, env: dict[str, Any], classes: dict[str, ast.ClassDef]
) -> None:
    owner: dict[int, str] = {}
    for cls in classes.values():
        for stmt in cls.body:
            target = None
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                target = stmt.target.id
            elif isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                target = stmt.targets[0].id
            if target is None:
                continue
            for node in ast.walk(stmt):
                owner[id(node)] = f"{cls.name}.{target}"
    for name, default, call in _ast.getenv_calls(tree):
        info = env.setdefault(name, {"read_in": [], "defaults": []})
        if member not in info["read_in"]:
            info["read_in"].append(member)
        d = None if default is None else _ast.literal(default, _ast.unparse(default))
        if d not in info["defaults"]:
            info["defaults"].append(d)
        if id(call) in owner:
            info.setdefault("feeds", [])
            if owner[id(call)] not in info["feeds"]:
                info["feeds"].append(owner[id(call)])
    for info in env.values():
        info["read_in"].sort()
        info["defaults"].sort(key=repr)
        if "feeds" in info:
            info["feeds"].sort()
