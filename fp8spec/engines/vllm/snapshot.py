"""Static (ast-only) extractor for a vLLM wheel: EngineArgs, CLI flags, choice lists, env vars.

Sources inside the wheel:
- ``vllm/engine/arg_utils.py``: ``EngineArgs`` fields and the ``add_cli_args`` functions of
  ``EngineArgs``/``AsyncEngineArgs`` (every flag spelling is a literal there).
- ``vllm/config/**.py``: the config dataclasses whose field types decide the argparse behaviour
  (``_compute_kwargs``: bool -> ``--x/--no-x``; ``Literal`` -> choices, or only a metavar when ``str``
  is also allowed, in which case argparse accepts any string and validation happens later).
- ``vllm/model_executor/layers/quantization/__init__.py``: ``QuantizationMethods``.
- ``vllm/config/cache.py``: ``CacheDType``; ``vllm/config/quantization.py``: ``_ONLINE_SHORTHANDS``.
- ``vllm/envs.py``: ``environment_variables`` keys, typed defaults from the ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

import ast
from typing import Any

from fp8spec.snapshots import _ast
from fp8spec.snapshots.artifacts import Artifact

EXTRACTOR_VERSION = 1

ARG_UTILS = "vllm/engine/arg_utils.py"
QUANT_INIT = "vllm/model_executor/layers/quantization/__init__.py"
CACHE_CONFIG = "vllm/config/cache.py"
QUANT_CONFIG = "vllm/config/quantization.py"
ENVS = "vllm/envs.py"


def extract(art: Artifact) -> dict[str, Any]:
    config_index, aliases = _config_index(art)
    engine_tree = art.tree(ARG_UTILS)
    engine_cls = _ast.find_class(engine_tree, "EngineArgs")
    if engine_cls is None:
        raise ValueError(f"{ARG_UTILS} has no class EngineArgs")
    fields = _engine_fields(engine_cls, config_index)
    flags = _cli_flags(engine_tree, fields, config_index, aliases)
    choices = _choices(art)
    data: dict[str, Any] = {
        "sources": sorted(
            {ARG_UTILS, QUANT_INIT, CACHE_CONFIG, ENVS} | ({QUANT_CONFIG} if art.has(QUANT_CONFIG) else set())
        ),
        "fields": {"EngineArgs": fields},
        "flags": flags,
        "choices": choices,
        "env": _env(art),
        "config_classes": {
            name: {f["name"]: _ast.public(f) for f in entry["fields"]}
            for name, entry in sorted(config_index.items())
        },
        "parser": {
            "underscore_spelling_accepted": _flexible_underscores(art),
            "note": "vLLM's FlexibleArgumentParser also accepts --a_b for --a-b and --cfg.key=value for JSON "
            "config flags; flags lists the spellings registered with argparse.",
        },
    }
    return data


# ----------------------------------------------------------------------------- config classes
def _config_index(art: Artifact) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """Every dataclass-like class in vllm/config/**.py (name -> file, fields), plus Literal aliases."""
    index: dict[str, dict[str, Any]] = {}
    aliases: dict[str, list[Any]] = {}
    members = list(art.glob("vllm/config/")) + [m for m in (QUANT_INIT,) if art.has(m)]
    for member in members:
        tree = art.tree(member)
        aliases.update(_ast.literal_aliases(tree))
        if not member.startswith("vllm/config/"):
            continue
        for cls in _ast.classes(tree):
            decos = _ast.decorator_names(cls)
            if not ({"config", "dataclass"} & set(decos)):
                continue
            if cls.name in index:  # first definition wins; keep it stable
                continue
            index[cls.name] = {"file": member, "fields": _ast.class_fields(cls)}
    return index, aliases


def _config_field(config_index: dict[str, Any], cls: str, name: str) -> dict[str, Any] | None:
    entry = config_index.get(cls)
    if not entry:
        return None
    for f in entry["fields"]:
        if f["name"] == name:
            return f
    return None


# ----------------------------------------------------------------------------- EngineArgs
def _engine_fields(cls: ast.ClassDef, config_index: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in _ast.class_fields(cls):
        entry = _ast.public(f)
        node = f.get("_default_node")
        ref = _config_reference(node) if node is not None else None
        if ref is not None:
            target = _config_field(config_index, *ref)
            if target is not None:
                entry["default_from"] = f"{ref[0]}.{ref[1]}"
                if "default" in target:
                    entry["resolved_default"] = target["default"]
                if "default_value" in target:
                    entry["default_value"] = target["default_value"]
        out[f["name"]] = entry
    return out


def _config_reference(node: ast.AST) -> tuple[str, str] | None:
    """``ModelConfig.quantization`` or ``get_field(ModelConfig, "x")`` -> (class, field)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id, node.attr
    if isinstance(node, ast.Call) and _ast.unparse(node.func).endswith("get_field") and len(node.args) == 2:
        cls, name = node.args
        if isinstance(cls, ast.Name) and isinstance(name, ast.Constant) and isinstance(name.value, str):
            return cls.id, name.value
    return None


# ----------------------------------------------------------------------------- CLI
def _type_behaviour(annotation: ast.AST | None, config_index: dict[str, Any], aliases) -> dict[str, Any]:
    """What vLLM's ``_compute_kwargs`` does with a field type (see module docstring)."""
    if annotation is None:
        return {}
    members = _ast.union_members(annotation)
    names = {_ast.member_name(m) for m in members}
    if any(n in config_index and (n.endswith(("Config", "Args"))) for n in names - {"None"}):
        return {"kind": "json"}
    if names == {"bool", "str", "None"}:
        return {"kind": "optional_value"}
    if "bool" in names:
        return {"kind": "boolean_optional"}
    for m in members:
        vals = _ast.literal_values(m, aliases)
        if vals is not None:
            out: dict[str, Any] = {
                "kind": "choices",
                "choices": sorted(vals, key=lambda v: (str(type(v)), v)),
            }
            out["choices_enforced"] = "str" not in names
            if "None" in names:
                out["accepts_none"] = True
            return out
    if names & {"dict"} or any(n.startswith("dict") for n in names):
        return {"kind": "json"}
    return {"kind": "value"}


def _cli_flags(tree: ast.Module, fields: dict[str, Any], config_index, aliases) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for cls_name in ("EngineArgs", "AsyncEngineArgs"):
        cls = _ast.find_class(tree, cls_name)
        if cls is None:
            continue
        func = None
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "add_cli_args":
                func = stmt
        if func is None:
            continue
        kwargs_vars = _kwargs_sources(func)
        for call in _ast.calls_named(func, "add_argument"):
            options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not options:
                continue
            kws = {k.arg: k.value for k in call.keywords if k.arg}
            starred = [k.value for k in call.keywords if k.arg is None]
            dest = _ast.literal(kws["dest"], None) if "dest" in kws else None
            if dest is None:
                longs = [o for o in options if o.startswith("--")]
                dest = (longs[0] if longs else options[0]).lstrip("-").replace("-", "_")
            entry: dict[str, Any] = {"dest": dest, "registered_by": f"{cls_name}.add_cli_args"}
            behaviour: dict[str, Any] = {}
            for s in starred:
                ref = _kwargs_reference(s, kwargs_vars)
                if ref is not None:
                    entry["from_config"] = f"{ref[0]}.{ref[1]}"
                    target = _config_field(config_index, *ref)
                    ann = target["_annotation_node"] if target else None
                    if ann is None and ref[1] in fields:
                        ann = ast.parse(fields[ref[1]]["annotation"], mode="eval").body
                    behaviour = _type_behaviour(ann, config_index, aliases)
            if "action" in kws:
                action = _ast.unparse(kws["action"])
                entry["action"] = action.strip("'\"")
                if action.endswith("BooleanOptionalAction"):
                    behaviour = {"kind": "boolean_optional"}
                elif action.strip("'\"") in ("store_true", "store_false"):
                    behaviour = {"kind": "flag"}
                else:
                    behaviour = {"kind": "custom_action"}
            if "choices" in kws:
                vals = _ast.literal(kws["choices"], None)
                behaviour = dict(behaviour)
                if isinstance(vals, list):
                    behaviour["choices"] = vals
                    behaviour["choices_enforced"] = True
                else:
                    behaviour["choices_expr"] = _ast.unparse(kws["choices"])
            if "default" in kws:
                entry["default"] = _ast.unparse(kws["default"])
            if not behaviour.get("kind"):
                behaviour = {"kind": "value", **behaviour}
            entry.update(behaviour)
            entry["spellings"] = list(options)
            if behaviour.get("kind") == "boolean_optional":
                entry["spellings"] += ["--no-" + o[2:] for o in options if o.startswith("--")]
            for spelling in entry["spellings"]:
                item = dict(entry)
                item["negated"] = spelling.startswith("--no-") and spelling not in options
                flags[spelling] = item
    return flags


def _kwargs_sources(func: ast.FunctionDef) -> dict[str, str]:
    """``model_kwargs = get_kwargs(ModelConfig)`` -> {"model_kwargs": "ModelConfig"}."""
    out: dict[str, Any] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Call) and _ast.unparse(v.func).endswith("get_kwargs") and v.args:
                if isinstance(v.args[0], ast.Name):
                    out[node.targets[0].id] = v.args[0].id
    for node in ast.walk(func):  # var = get_kwargs(Cls)["x"] / model_kwargs["x"]
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Subscript):
                ref = _kwargs_reference(node.value, out)
                if ref is not None:
                    out[node.targets[0].id] = ref
    return out


def _kwargs_reference(node: ast.AST, kwargs_vars: dict[str, Any]) -> tuple[str, str] | None:
    """``**model_kwargs["x"]``, ``**{**model_kwargs["x"], "default": None}`` or ``**var`` where
    ``var = get_kwargs(Cls)["x"]`` -> (Cls, "x")."""
    if isinstance(node, ast.Subscript):
        key = _ast.literal(node.slice, None)
        if isinstance(node.value, ast.Name):
            cls = kwargs_vars.get(node.value.id)
        elif isinstance(node.value, ast.Call) and _ast.unparse(node.value.func).endswith("get_kwargs"):
            cls = (
                node.value.args[0].id
                if node.value.args and isinstance(node.value.args[0], ast.Name)
                else None
            )
        else:
            cls = None
        if isinstance(cls, str) and isinstance(key, str):
            return cls, key
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if k is None:
                ref = _kwargs_reference(v, kwargs_vars)
                if ref is not None:
                    return ref
    if isinstance(node, ast.Name):
        ref = kwargs_vars.get(node.id)
        if isinstance(ref, tuple):
            return ref
    return None


def _flexible_underscores(art: Artifact) -> bool:
    for member in ("vllm/utils/argparse_utils.py", "vllm/utils/__init__.py"):
        if art.has(member) and "FlexibleArgumentParser" in art.read_text(member):
            text = art.read_text(member)
            return 'replace("_", "-")' in text or "replace('_', '-')" in text
    return False


# ----------------------------------------------------------------------------- choices
def _choices(art: Artifact) -> dict[str, Any]:
    out: dict[str, Any] = {}
    qtree = art.tree(QUANT_INIT)
    qassign = _ast.module_assignments(qtree)
    if "QuantizationMethods" in qassign:
        out["quantization"] = _ast.literal_values(qassign["QuantizationMethods"])
    if "DEPRECATED_QUANTIZATION_METHODS" in qassign:
        out["quantization_deprecated"] = _ast.literal(qassign["DEPRECATED_QUANTIZATION_METHODS"], None)
    ctree = art.tree(CACHE_CONFIG)
    cassign = _ast.module_assignments(ctree)
    if "CacheDType" in cassign:
        out["kv_cache_dtype"] = _ast.literal_values(cassign["CacheDType"])
    if art.has(QUANT_CONFIG):
        qc = _ast.module_assignments(art.tree(QUANT_CONFIG))
        for key, name in (
            ("_ONLINE_SHORTHANDS", "quantization_online_shorthands"),
            ("QUANT_KEY_NAMES", "quant_key_names"),
        ):
            node = qc.get(key)
            if isinstance(node, ast.Dict):
                out[name] = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        if "_DEFERRED_ONLINE_SHORTHANDS" in qc:
            node = qc["_DEFERRED_ONLINE_SHORTHANDS"]
            if isinstance(node, ast.Call) and node.args:
                val = _ast.literal(node.args[0], None)
                if val is not None:
                    out["quantization_online_deferred"] = sorted(val)
    return {k: v for k, v in out.items() if v is not None}


# ----------------------------------------------------------------------------- env vars
def _env(art: Artifact) -> dict[str, Any]:
    tree = art.tree(ENVS)
    typed: dict[str, dict[str, Any]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _ast.unparse(stmt.test) == "TYPE_CHECKING":
            for s in stmt.body:
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                    info: dict[str, Any] = {"type": _ast.unparse(s.annotation)}
                    if s.value is not None:
                        info["default"] = _ast.unparse(s.value)
                        v = _ast.default_value(s.value)
                        if v is not _ast.MISSING:
                            info["default_value"] = v
                    typed[s.target.id] = info
    table = _ast.module_assignments(tree).get("environment_variables")
    out: dict[str, Any] = {}
    if isinstance(table, ast.Dict):
        for k, v in zip(table.keys, table.values):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                continue
            info = dict(typed.get(k.value, {}))
            raw = _raw_env_default(k.value, v)
            if raw is not _ast.MISSING:
                info["raw_default"] = raw
            choices = _env_choices(v)
            if choices is not None:
                info["choices"] = choices
            out[k.value] = info
    return out


def _raw_env_default(name: str, getter: ast.AST) -> Any:
    """The string default a getter passes to os.getenv / env_with_choices for this name."""
    for env_name, default, _call in _ast.getenv_calls(getter):
        if env_name == name:
            if default is None:
                return None
            return _ast.literal(default, _ast.unparse(default))
    for c in ast.walk(getter):
        if (
            isinstance(c, ast.Call)
            and _ast.unparse(c.func).split(".")[-1].startswith("env_")
            and len(c.args) >= 2
        ):
            if _ast.literal(c.args[0], None) == name:
                return _ast.literal(c.args[1], _ast.unparse(c.args[1]))
    return _ast.MISSING


def _env_choices(getter: ast.AST) -> list[Any] | None:
    for c in ast.walk(getter):
        if isinstance(c, ast.Call) and _ast.unparse(c.func).split(".")[-1] in (
            "env_with_choices",
            "env_list_with_choices",
        ):
            if len(c.args) >= 3:
                vals = _ast.literal(c.args[2], None)
                if isinstance(vals, list):
                    return vals
            for k in c.keywords:
                if k.arg == "choices":
                    vals = _ast.literal(k.value, None)
                    if isinstance(vals, list):
                        return vals
    return None
