"""Static (ast-only) extractor for an SGLang wheel: ServerArgs fields, CLI flags, choices, env vars.

Two layouts are handled:
- new (0.5.2x): fields live in ``sglang/srt/arg_groups/fields/*.py`` as ``A[T, Arg(...)]`` annotations on
  namespace classes that ``server_args._INPUT_NAMESPACES`` lists; ``add_cli_args_from_dataclass`` turns
  them into flags (``cli_name`` or ``--`` + field with hyphens, plus ``aliases``; ``no_cli`` skips;
  fields without ``Arg``/help metadata are skipped); ``ServerArgs.add_cli_args`` adds a few flags by hand.
- old (0.5.1x): ``ServerArgs`` is a dataclass in ``sglang/srt/server_args.py`` and ``add_cli_args`` spells
  every flag out with ``parser.add_argument``.
Env vars come from ``class Envs`` in ``sglang/srt/environ.py`` (plus its ``_DEPRECATED_ENVS`` table).
"""

from __future__ import annotations

import ast
from typing import Any

from fp8spec.snapshots import _ast
from fp8spec.snapshots.artifacts import Artifact

EXTRACTOR_VERSION = 1

SERVER_ARGS = "sglang/srt/server_args.py"
FIELDS_PKG = "sglang/srt/arg_groups/fields/"
CHOICES = "sglang/srt/arg_groups/choices.py"
ENVIRON = "sglang/srt/environ.py"


def extract(art: Artifact) -> dict[str, Any]:
    server_tree = art.tree(SERVER_ARGS)
    namespaces = _input_namespaces(server_tree)
    if namespaces and any(True for _ in art.glob(FIELDS_PKG)):
        layout = "arg_groups"
        fields, flags, sources = _new_layout(art, server_tree, namespaces)
    else:
        layout = "server_args"
        fields, flags, sources = _old_layout(art, server_tree)
    choices: dict[str, Any] = {}
    for dest in ("quantization", "kv_cache_dtype"):
        for _spelling, info in sorted(flags.items()):
            if info["dest"] == dest and "choices" in info:
                choices[dest] = info["choices"]
                break
    env, env_deprecated = _env(art)
    return {
        "layout": layout,
        "sources": sorted(sources | {ENVIRON}),
        "fields": {"ServerArgs": fields},
        "flags": flags,
        "choices": choices,
        "env": env,
        "env_deprecated": env_deprecated,
        "parser": {
            "note": "flags lists the spellings registered with argparse; fields with no flag (no_cli, or no Arg "
            "metadata) can only be set through the Python ServerArgs/Engine API.",
        },
    }


# ----------------------------------------------------------------------------- helpers
class _Names:
    """Resolve a Name used as ``choices=`` against module-level assignments of several modules."""

    def __init__(self, trees: list[ast.Module]):
        self.values: dict[str, ast.AST] = {}
        for t in trees:
            for k, v in _ast.module_assignments(t).items():
                self.values.setdefault(k, v)

    def resolve(self, node: ast.AST, depth: int = 0) -> Any:
        v = _ast.literal(node, _ast.MISSING)
        if v is not _ast.MISSING:
            return v
        if isinstance(node, ast.Name) and depth < 5 and node.id in self.values:
            return self.resolve(self.values[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.resolve(node.left, depth + 1), self.resolve(node.right, depth + 1)
            if isinstance(left, list) and isinstance(right, list):
                return left + right
        if (
            isinstance(node, ast.Call)
            and _ast.unparse(node.func) in ("list", "sorted", "set")
            and len(node.args) == 1
        ):
            inner = self.resolve(node.args[0], depth + 1)
            if isinstance(inner, list):
                return sorted(inner, key=repr) if _ast.unparse(node.func) != "list" else inner
        return _ast.MISSING


def _action_classes(trees: list[ast.Module]) -> dict[str, bool]:
    """argparse.Action subclasses -> whether their ``__call__`` stores a value on the namespace."""
    out = {}
    for t in trees:
        for cls in _ast.classes(t):
            if "Action" not in "".join(_ast.base_names(cls)) and not cls.name.endswith("Action"):
                continue
            call = next(
                (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__call__"), None
            )
            if call is None:
                stores = any("_StoreTrueAction" in b or "_StoreAction" in b for b in _ast.base_names(cls))
            else:
                stores = any(
                    isinstance(c, ast.Call) and _ast.unparse(c.func) in ("setattr", "super().__call__")
                    for c in ast.walk(call)
                ) or any(
                    isinstance(c, ast.Call) and _ast.unparse(c.func).endswith("__call__")
                    for c in ast.walk(call)
                )
            out[cls.name] = stores
    return out


def _flag_entry(
    options: list[str],
    dest: str,
    *,
    action: str | None,
    choices: Any,
    default: str | None,
    registered_by: str,
    actions: dict[str, bool],
    nargs: Any = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"dest": dest, "spellings": list(options), "registered_by": registered_by}
    if action is not None:
        entry["action"] = action
        name = action.split(".")[-1]
        if name.startswith("Deprecated"):
            entry["deprecated"] = True
        if name in actions and not actions[name]:
            entry["ignored"] = True  # the action only warns; the value never reaches ServerArgs
        if name in ("store_true", "store_false", "BooleanOptionalAction") or name.startswith(
            "DeprecatedStoreTrue"
        ):
            entry["kind"] = "flag"
        else:
            entry["kind"] = "custom_action"
    else:
        entry["kind"] = "value"
    if choices is not None:
        if isinstance(choices, list):
            entry["choices"] = choices
            entry["choices_enforced"] = True
            if entry["kind"] == "value":
                entry["kind"] = "choices"
        else:
            entry["choices_expr"] = choices
    if nargs is not None:
        entry["nargs"] = nargs
    if default is not None:
        entry["default"] = default
    return entry


def _add_flag(flags: dict[str, Any], entry: dict[str, Any]) -> None:
    base = list(entry["spellings"])
    negations: list[str] = []
    if entry.get("action", "").endswith("BooleanOptionalAction"):
        negations = ["--no-" + s[2:] for s in base if s.startswith("--")]
        entry["spellings"] = base + negations
    for s in entry["spellings"]:
        item = dict(entry)
        item["negated"] = s in negations
        flags[s] = item


def _add_argument_flags(
    func: ast.AST, names: _Names, actions: dict[str, bool], registered_by: str, flags: dict[str, Any]
) -> None:
    for options, kws, dest in _ast.add_argument_calls(func):
        choices = None
        if "choices" in kws:
            resolved = names.resolve(kws["choices"])
            choices = resolved if isinstance(resolved, list) else _ast.unparse(kws["choices"])
        action = _ast.unparse(kws["action"]).strip("'\"") if "action" in kws else None
        entry = _flag_entry(
            options,
            dest,
            action=action,
            choices=choices,
            default=_ast.unparse(kws["default"]) if "default" in kws else None,
            registered_by=registered_by,
            actions=actions,
            nargs=_ast.literal(kws["nargs"], _ast.unparse(kws["nargs"])) if "nargs" in kws else None,
        )
        _add_flag(flags, entry)


# ----------------------------------------------------------------------------- old layout
def _old_layout(art: Artifact, tree: ast.Module):
    cls = _ast.find_class(tree, "ServerArgs")
    if cls is None:
        raise ValueError(f"{SERVER_ARGS} has no class ServerArgs")
    fields = {f["name"]: _ast.public(f) for f in _ast.class_fields(cls)}
    names = _Names([tree])
    actions = _action_classes([tree])
    flags: dict[str, Any] = {}
    func = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "add_cli_args"), None)
    if func is None:
        raise ValueError("ServerArgs.add_cli_args not found")
    _add_argument_flags(func, names, actions, "ServerArgs.add_cli_args", flags)
    _mark_cli(fields, flags, _from_cli_renames(cls))
    return fields, flags, {SERVER_ARGS}


def _from_cli_renames(cls: ast.ClassDef | None) -> dict[str, str]:
    """``args.tp_size = args.tensor_parallel_size`` in ``from_cli_args`` -> {"tensor_parallel_size": "tp_size"}."""
    out: dict[str, str] = {}
    if cls is None:
        return out
    func = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "from_cli_args"), None)
    if func is None:
        return out
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and _ast.unparse(node.targets[0].value) == _ast.unparse(node.value.value)
        ):
            out[node.value.attr] = node.targets[0].attr
    return out


def _mark_cli(fields: dict[str, Any], flags: dict[str, Any], renames: dict[str, str]) -> None:
    """Set each flag's ``field`` (where its value lands in ServerArgs) and each field's ``cli`` spellings."""
    by_field: dict[str, list[str]] = {}
    for spelling, info in flags.items():
        target = renames.get(info["dest"], info["dest"])
        info["field"] = target if target in fields else None
        if info["field"] and not info.get("ignored"):
            by_field.setdefault(target, []).append(spelling)
    for name, entry in fields.items():
        entry["cli"] = sorted(by_field.get(name, []))


# ----------------------------------------------------------------------------- new layout
def _input_namespaces(tree: ast.Module) -> list[str]:
    node = _ast.module_assignments(tree).get("_INPUT_NAMESPACES")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.id for e in node.elts if isinstance(e, ast.Name)]
    return []


def _new_layout(art: Artifact, server_tree: ast.Module, namespaces: list[str]):
    members = sorted(art.glob(FIELDS_PKG))
    trees = {m: art.tree(m) for m in members}
    extra_trees = [art.tree(CHOICES)] if art.has(CHOICES) else []
    utils = "sglang/srt/arg_groups/argparse_actions.py"
    action_trees = [server_tree] + ([art.tree(utils)] if art.has(utils) else [])
    actions = _action_classes(action_trees)
    class_index: dict[str, tuple[str, ast.ClassDef]] = {}
    for m, t in trees.items():
        for c in _ast.classes(t):
            class_index.setdefault(c.name, (m, c))
    fields: dict[str, Any] = {}
    flags: dict[str, Any] = {}
    sources = {SERVER_ARGS} | ({CHOICES} if extra_trees else set())
    for ns_name in namespaces:
        if ns_name not in class_index:
            raise ValueError(f"namespace class {ns_name} not found under {FIELDS_PKG}")
        member, cls = class_index[ns_name]
        sources.add(member)
        names = _Names([trees[member]] + extra_trees)
        ns_path = None
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_NS_PATH" for t in stmt.targets
            ):
                ns_path = _ast.literal(stmt.value, None)
        for f in _ast.class_fields(cls):
            name = f["name"]
            if name.startswith("_"):
                continue
            inner, meta = _split_annotated(f["_annotation_node"])
            entry = _ast.public(f)
            entry["annotation"] = _ast.unparse(inner)
            entry["namespace"] = ns_path
            entry["class"] = ns_name
            if name in fields:
                raise ValueError(f"field {name} declared twice")
            fields[name] = entry
            if meta is None:
                entry["cli"] = []
                entry["no_cli_reason"] = "no Arg metadata"
                continue
            if meta.get("no_cli"):
                entry["cli"] = []
                entry["no_cli_reason"] = "no_cli=True"
                continue
            cli_name = meta.get("cli_name") or "--" + name.replace("_", "-")
            aliases = meta.get("aliases") or []
            options = [cli_name] + list(aliases)
            choices_node = meta.get("_choices_node")
            choices: Any = None
            if choices_node is not None:
                resolved = names.resolve(choices_node)
                choices = resolved if isinstance(resolved, list) else _ast.unparse(choices_node)
            literal_vals = None
            opt_members = [m for m in _ast.union_members(inner) if _ast.member_name(m) != "None"]
            if len(opt_members) == 1:
                literal_vals = _ast.literal_values(opt_members[0])
            action = meta.get("action")
            kind_action = None
            if action is not None:
                kind_action = action
            elif literal_vals is not None:
                choices = choices if choices is not None else literal_vals
            elif len(opt_members) == 1 and _ast.member_name(opt_members[0]) in ("bool",):
                kind_action = "store_true"
            item = _flag_entry(
                options,
                name,
                action=kind_action,
                choices=choices,
                default=f.get("default"),
                registered_by="add_cli_args_from_dataclass",
                actions=actions,
                nargs=meta.get("nargs")
                or (
                    "+"
                    if len(opt_members) == 1
                    and _ast.member_name(opt_members[0]) in ("list", "List")
                    and not meta.get("type_parser")
                    else None
                ),
            )
            _add_flag(flags, item)
    server_cls = _ast.find_class(server_tree, "ServerArgs")
    func = (
        next(
            (s for s in server_cls.body if isinstance(s, ast.FunctionDef) and s.name == "add_cli_args"), None
        )
        if server_cls
        else None
    )
    if func is not None:
        _add_argument_flags(
            func, _Names([server_tree] + extra_trees), actions, "ServerArgs.add_cli_args", flags
        )
    _mark_cli(fields, flags, _from_cli_renames(server_cls))
    return fields, flags, sources


def _split_annotated(annotation: ast.AST) -> tuple[ast.AST, dict[str, Any] | None]:
    """``A[T, "help"]`` / ``A[T, Arg(...)]`` / ``Annotated[...]`` -> (T, Arg kwargs) ; else (annotation, None)."""
    if isinstance(annotation, ast.Subscript) and _ast.member_name(annotation) in ("A", "Annotated"):
        sl = annotation.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        inner = elts[0]
        for meta in elts[1:]:
            if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                return inner, {}
            if isinstance(meta, ast.JoinedStr) or (isinstance(meta, ast.BinOp) and _is_stringy(meta)):
                return inner, {}
            if isinstance(meta, ast.Call) and _ast.member_name(meta.func) == "Arg":
                out: dict[Any, Any] = {}  # keyed by keyword name (None for a **mapping)
                for k in meta.keywords:
                    if k.arg == "help":
                        continue
                    if k.arg == "choices":
                        out["_choices_node"] = k.value
                    elif k.arg in ("action", "type_parser"):
                        out[k.arg] = _ast.unparse(k.value)
                    else:
                        out[k.arg] = _ast.literal(k.value, _ast.unparse(k.value))
                return inner, out
        return inner, None
    return annotation, None


def _is_stringy(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_stringy(node.left) or _is_stringy(node.right)
    return False


# ----------------------------------------------------------------------------- env vars
def _env(art: Artifact) -> tuple[dict[str, Any], dict[str, Any]]:
    tree = art.tree(ENVIRON)
    env: dict[str, Any] = {}
    cls = _ast.find_class(tree, "Envs")
    if cls is not None:
        for stmt in cls.body:
            if not (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                continue
            call = stmt.value
            if not (isinstance(call, ast.Call) and _ast.member_name(call.func).startswith("Env")):
                continue
            info: dict[str, Any] = {"type": _ast.member_name(call.func)}
            if call.args:
                info["default"] = _ast.unparse(call.args[0])
                v = _ast.default_value(call.args[0])
                if v is not _ast.MISSING:
                    info["default_value"] = v
            for k in call.keywords:
                if k.arg == "deprecated_name":
                    info["deprecated_name"] = _ast.literal(k.value, _ast.unparse(k.value))
                elif k.arg == "default":
                    info["default"] = _ast.unparse(k.value)
                    v = _ast.default_value(k.value)
                    if v is not _ast.MISSING:
                        info["default_value"] = v
            env[stmt.targets[0].id] = info
    deprecated: dict[str, Any] = {}
    table = _ast.module_assignments(tree).get("_DEPRECATED_ENVS")
    if isinstance(table, ast.Dict):
        for key, v in zip(table.keys, table.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                item: dict[str, Any] = {
                    "kind": _ast.member_name(v.func) if isinstance(v, ast.Call) else _ast.unparse(v)
                }
                if isinstance(v, ast.Call):
                    for kw in v.keywords:
                        lit = _ast.literal(kw.value, _ast.unparse(kw.value))
                        item[kw.arg or "_"] = lit
                    if v.args:
                        item["args"] = [_ast.literal(a, _ast.unparse(a)) for a in v.args]
                deprecated[key.value] = item
    return env, deprecated
