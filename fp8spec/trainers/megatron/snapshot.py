"""Static (ast-only) extractor for a megatron-core wheel.

Records the dataclass fields (name, annotation, default, Literal choices) of ``TransformerConfig`` (with
the ``ModelParallelConfig`` fields it inherits), ``OptimizerConfig`` and ``DistributedDataParallelConfig``,
the ``Fp8Recipe``/``Fp4Recipe`` enums, and — when the wheel ships ``megatron/training`` (0.17+) — the CLI
flags: the ones ``ArgumentGroupFactory(TransformerConfig, exclude=...)`` derives from the dataclass
(``--a-b``; bool defaulting to False -> ``store_true``; otherwise ``--no-a-b``/``--disable-a-b``;
``argparse_meta.arg_names`` overrides) plus every literal ``add_argument`` spelling in ``arguments.py``.

The runtime check (building the real ``TransformerConfig`` on CPU torch) is in ``megatron_check``.
"""

from __future__ import annotations

import ast
from typing import Any

from fp8spec.snapshots import _ast
from fp8spec.snapshots.artifacts import Artifact

EXTRACTOR_VERSION = 1

CLASS_FILES = {
    "ModelParallelConfig": "megatron/core/model_parallel_config.py",
    "TransformerConfig": "megatron/core/transformer/transformer_config.py",
    "OptimizerConfig": "megatron/core/optimizer/optimizer_config.py",
    "DistributedDataParallelConfig": "megatron/core/distributed/distributed_data_parallel_config.py",
}
ENUMS = "megatron/core/enums.py"
ARGUMENTS = "megatron/training/arguments.py"


def extract(art: Artifact) -> dict[str, Any]:
    class_nodes: dict[str, ast.ClassDef] = {}
    for name, member in CLASS_FILES.items():
        if not art.has(member):
            continue
        cls = _ast.find_class(art.tree(member), name)
        if cls is not None:
            class_nodes[name] = cls
    if "TransformerConfig" not in class_nodes:
        raise ValueError("TransformerConfig not found in the wheel")
    fields: dict[str, Any] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(class_nodes):
        merged = _merged_fields(name, class_nodes)
        raw[name] = merged
        fields[name] = {f["name"]: _field_entry(f) for f in merged}
    data: dict[str, Any] = {
        "sources": sorted(
            [m for m in CLASS_FILES.values() if art.has(m)] + [m for m in (ENUMS, ARGUMENTS) if art.has(m)]
        ),
        "fields": fields,
        "enums": _enums(art),
        "choices": {
            f"TransformerConfig.{k}": v["choices"]
            for k, v in fields["TransformerConfig"].items()
            if "choices" in v and k.startswith(("fp8", "fp4", "moe_router_dtype"))
        },
    }
    if art.has(ARGUMENTS):
        data["flags"] = _flags(art, raw["TransformerConfig"])
        data["flags_note"] = (
            "megatron/training CLI (pretrain_gpt.py etc.). verl passes TransformerConfig fields as a dict "
            "(override_transformer_config), so fields, not flags, are what verl bundles use."
        )
    else:
        data["flags"] = {}
        data["flags_note"] = "this wheel does not ship megatron/training, so it has no CLI flags"
    return data


def _merged_fields(name: str, class_nodes: dict[str, ast.ClassDef]) -> list[dict[str, Any]]:
    cls = class_nodes[name]
    out: list[dict[str, Any]] = []
    for base in _ast.base_names(cls):
        if base in class_nodes:
            out.extend(_merged_fields(base, class_nodes))
    own = _ast.class_fields(cls)
    for f in own:
        f["declared_in"] = name
    names = {f["name"] for f in own}
    return [f for f in out if f["name"] not in names] + own


def _field_entry(f: dict[str, Any]) -> dict[str, Any]:
    entry = _ast.public(f)
    members = _ast.union_members(f["_annotation_node"])
    for m in members:
        vals = _ast.literal_values(m)
        if vals is not None:
            entry["choices"] = vals
            entry["accepts_none"] = any(_ast.member_name(x) == "None" for x in members)
    meta = f.get("_extra", {}).get("metadata")
    if isinstance(meta, ast.Dict):
        for k, v in zip(meta.keys, meta.values):
            if isinstance(k, ast.Constant) and k.value == "argparse_meta":
                entry["argparse_meta"] = _ast.literal(v, _ast.unparse(v))
    return entry


def _enums(art: Artifact) -> dict[str, Any]:
    if not art.has(ENUMS):
        return {}
    out: dict[str, Any] = {}
    for cls in _ast.classes(art.tree(ENUMS)):
        if cls.name not in ("Fp8Recipe", "Fp4Recipe"):
            continue
        members = {}
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                members[stmt.targets[0].id] = _ast.literal(stmt.value, _ast.unparse(stmt.value))
        out[cls.name] = members
    return out


# ----------------------------------------------------------------------------- CLI flags (0.17+)
def _flags(art: Artifact, tc_fields: list[dict[str, Any]]) -> dict[str, Any]:
    tree = art.tree(ARGUMENTS)
    flags: dict[str, Any] = {}
    exclude = _transformer_exclude(tree)
    if exclude is not None:
        for f in tc_fields:
            if f["name"] in exclude or f.get("init") is False:
                continue
            entry = _derived_flag(f)
            for s in entry["spellings"]:
                flags[s] = dict(entry)
    for options, kws, dest in _ast.add_argument_calls(tree):
        entry = {
            "dest": dest,
            "spellings": options,
            "registered_by": "arguments.py add_argument",
        }
        if "action" in kws:
            entry["action"] = _ast.unparse(kws["action"]).strip("'\"")
        if "choices" in kws:
            vals = _ast.literal(kws["choices"], None)
            if isinstance(vals, list):
                entry["choices"] = vals
            else:
                entry["choices_expr"] = _ast.unparse(kws["choices"])
        for s in options:
            flags.setdefault(s, dict(entry))
    return flags


def _transformer_exclude(tree: ast.Module) -> set[str] | None:
    """The ``exclude`` list passed to ``ArgumentGroupFactory(TransformerConfig, exclude=...)``."""
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        call = None
        for c in ast.walk(func):
            if (
                isinstance(c, ast.Call)
                and _ast.member_name(c.func) == "ArgumentGroupFactory"
                and c.args
                and isinstance(c.args[0], ast.Name)
                and c.args[0].id == "TransformerConfig"
            ):
                call = c
        if call is None:
            continue
        kw = next((k.value for k in call.keywords if k.arg == "exclude"), None)
        if kw is None:
            return set()
        direct = _ast.literal(kw, None)
        if isinstance(direct, list):
            return set(direct)
        if isinstance(kw, ast.Name):
            values: list[str] = []
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == kw.id for t in node.targets
                ):
                    v = _ast.literal(node.value, None)
                    if isinstance(v, list):
                        values = list(v)
                elif (
                    isinstance(node, ast.AugAssign)
                    and isinstance(node.target, ast.Name)
                    and node.target.id == kw.id
                ):
                    v = _ast.literal(node.value, None)
                    if isinstance(v, list):
                        values += v
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and _ast.unparse(node.func.value) == kw.id
                    and node.func.attr in ("extend", "append")
                    and node.args
                ):
                    v = _ast.literal(node.args[0], None)
                    if node.func.attr == "append" and isinstance(v, str):
                        values.append(v)
                    elif isinstance(v, list):
                        values += v
            return set(values)
    return None


def _derived_flag(f: dict[str, Any]) -> dict[str, Any]:
    name = f["name"]
    members = [m for m in _ast.union_members(f["_annotation_node"]) if _ast.member_name(m) != "None"]
    is_bool = len(members) == 1 and _ast.member_name(members[0]) == "bool"
    entry: dict[str, Any] = {"dest": name, "registered_by": "ArgumentGroupFactory(TransformerConfig)"}
    spellings = ["--" + name.replace("_", "-")]
    if is_bool:
        default = f.get("default_value", _ast.MISSING)
        if default is False:
            entry["action"] = "store_true"
        else:
            entry["action"] = "store_false"
            spellings = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
    for m in members:
        vals = _ast.literal_values(m)
        if vals is not None:
            entry["choices"] = vals
    meta = f.get("_extra", {}).get("metadata")
    if isinstance(meta, ast.Dict):
        for k, v in zip(meta.keys, meta.values):
            if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                for mk, mv in zip(v.keys, v.values):
                    if isinstance(mk, ast.Constant) and mk.value == "arg_names":
                        names = _ast.literal(mv, None)
                        if isinstance(names, list):
                            spellings = names
                    elif isinstance(mk, ast.Constant) and mk.value == "dest":
                        entry["dest"] = _ast.literal(mv, entry["dest"])
                    elif isinstance(mk, ast.Constant) and mk.value == "choices":
                        vals = _ast.literal(mv, None)
                        if isinstance(vals, list):
                            entry["choices"] = vals
    entry["spellings"] = spellings
    entry["field"] = name
    return entry
