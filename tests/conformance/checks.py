"""Conformance checks: every item a bundle emits, checked against the schema snapshots of the release it
targets (backends/snapshots, extracted from the released wheels), and Megatron's own TransformerConfig.

Each ``check_*`` function returns a list of problems (empty = conforms), so the negative tests can show
that hand-made bad bundles are caught. What is checked:

- Hydra overrides (verl bundles), parsed with Hydra's own override parser: a key of verl's composed tree
  (ppo_trainer, or ppo_trainer+model_engine=megatron) carries no '+'; any other key carries '+', its
  nearest existing ancestor is a mapping, and it sits under a mapping verl passes through (an empty ``{}``
  mapping of the composed tree, or a prefix listed in the verl profile's ``hydra.plus_required_under``,
  which ``fp8spec backends check`` confirms against the same snapshot). Keys under
  ``engine_kwargs.<engine>`` are engine fields of that engine version (values within its choices);
  ``override_transformer_config`` / ``override_optimizer_config`` keys are Megatron fields (values within
  their Literal choices); ``quantization`` is a quantization method the engine accepts.
- Serve bundles: the argv of ``engine_args.json``, parsed flag by flag: every flag is registered (and not
  ignored) by the engine version's argparse, every value within its choices, ``--quantization-config``
  keys are QuantizationConfigArgs fields and its ignore patterns use matching styles the version supports
  and match exactly the modules the spec keeps in BF16.
- Environment variables: read by the package they target (VLLM_*/SGLANG_*/NVTE_* in that release's
  snapshot; FP8SPEC_* by fp8spec.runtime; VERL_* by the installed verl release's source).
- Megatron bundles: the TransformerConfig/OptimizerConfig overrides pass
  ``fp8spec.trainers.megatron.config_check.validate_transformer_config`` (the real dataclasses on CPU torch)
  and the TE recipe exists with those fields (``check_te_recipe``).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import io
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ruamel.yaml import YAML

from fp8spec.profiles import load_profile
from fp8spec.quoting import shell_word
from fp8spec.snapshots import Fact, Snapshot
from fp8spec.targets import STACK_KINDS

REPO = Path(__file__).resolve().parents[2]
ENGINE_KWARGS = "actor_rollout_ref.rollout.engine_kwargs"
TRANSFORMER_OVERRIDE = "actor_rollout_ref.actor.megatron.override_transformer_config"
OPTIMIZER_OVERRIDE = "actor_rollout_ref.actor.optim.override_optimizer_config"
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"
MEGATRON_CONFIG = "ppo_trainer+model_engine=megatron"


# ----------------------------------------------------------------------------- compiling
@dataclass
class Compiled:
    label: str
    backend: str  # "fsdp+vllm", "vllm", ...
    validation: Any  # fp8spec.rules.runner.Validation
    plan: Any  # fp8spec.compiler.settings.SettingsPlan
    files: dict[str, str]

    @property
    def spec(self):
        return self.validation.loaded.spec

    @property
    def ctx(self):
        return self.validation.context

    @property
    def engine(self) -> str:
        return self.backend.rsplit("+", 1)[-1]

    @property
    def trainer(self) -> Optional[str]:
        return self.backend.split("+")[0] if "+" in self.backend else None

    def version(self, kind: str) -> str:
        field = next(f for f, k in STACK_KINDS.items() if k == kind)
        return getattr(self.spec.stack, field)

    @property
    def overrides(self) -> list[str]:
        return list(YAML(typ="safe").load(self.files["overrides.yaml"]) or [])

    @property
    def env(self) -> dict[str, str]:
        if self.trainer:
            return dict(YAML(typ="safe").load(self.files["runtime_env.yaml"])["env_vars"] or {})
        return dict(json.loads(self.files["engine_args.json"])["env"])

    @property
    def argv(self) -> list[str]:
        return list(json.loads(self.files["engine_args.json"])["argv"])


def compile_path(path: Path, backend: str, display: Optional[str] = None, label: str = "") -> Compiled:
    """Compile a spec file in memory exactly as ``fp8spec compile`` does, through the real API."""
    from fp8spec.compiler.build import build_settings_plan, validate_for
    from fp8spec.compiler.bundle import bundle_files

    display = display or str(path)
    validation, choice = validate_for(path, display, backend)  # retargeted when backend is not the spec's
    assert not validation.errors, [d.render() for d in validation.errors]
    plan = build_settings_plan(validation.valid(), choice)
    files = bundle_files(validation.valid(), choice, plan, display)
    return Compiled(label or f"{Path(display).stem}:{choice.name}", choice.name, validation, plan, files)


def merge(into: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def compile_variant(spec_path: Path, backend: str, patch: dict, tmp_dir: Path, label: str = "") -> Compiled:
    """The example spec with ``patch`` merged in (e.g. ``{"stack": {"vllm": "0.33.0"}}``), written to
    ``tmp_dir`` and compiled through the real API."""
    yaml = YAML()
    data = yaml.load(spec_path.read_text(encoding="utf-8"))
    merge(data, patch)
    config_path = (data.get("model") or {}).get("config_path")
    if config_path and not Path(config_path).is_absolute():  # relative to the spec's folder, which moves here
        data["model"]["config_path"] = str(spec_path.parent / config_path)
    reward = (data.get("reward") or {}).get("custom_function") or {}
    if reward.get("path") and not Path(reward["path"]).is_absolute():  # the same for the reward file
        reward["path"] = str(spec_path.parent / reward["path"])
    cluster = data.get("cluster") or {}
    if "stack" in patch and cluster.get("launcher") == "kuberay" and not (cluster.get("kuberay") or {}).get("image"):
        # verl publishes images only for the engine versions it pins (rule CLU001): a re-pinned KubeRay
        # spec names its own image
        merge(data, {"cluster": {"kuberay": {"image": "registry.example/verl:repinned"}}})
    out = io.StringIO()
    yaml.dump(data, out)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", label or json.dumps(patch, sort_keys=True))[:80]
    path = tmp_dir / f"{spec_path.stem}-{name}.yaml"
    path.write_text(out.getvalue(), encoding="utf-8")
    display = f"specs/{spec_path.name}"
    return compile_path(path, backend, display, label or f"{spec_path.stem}:{backend}:{patch}")


# ----------------------------------------------------------------------------- snapshots
@lru_cache(maxsize=None)
def snapshot(kind: str, version: str) -> Snapshot:
    return Snapshot.load(f"{kind}=={version}")


def _confirm(snap: Snapshot, kind: str, subject: str, value: Any = None) -> tuple[bool, str]:
    return snap.confirm(Fact(kind, subject, value))


# ----------------------------------------------------------------------------- Hydra overrides
def parse_overrides(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides)


def check_hydra(c: Compiled) -> list[str]:
    from hydra.core.override_parser.types import OverrideType

    problems: list[str] = []
    verl_version = c.version("verl")
    verl = snapshot("verl", verl_version)
    verl_profile = load_profile("verl", verl_version)
    parsed = parse_overrides(c.overrides)
    megatron = any(o.key_or_group == "model_engine" and o.value() == "megatron" for o in parsed)
    config = verl.data["configs"][MEGATRON_CONFIG if megatron else "ppo_trainer"]
    keys, mappings = config["keys"], set(config["mappings"])
    passthrough = set(config["open_mappings"]) | set(verl_profile.value("hydra.plus_required_under"))
    rollout_name = next((o.value() for o in parsed if o.key_or_group == "actor_rollout_ref.rollout.name"),
                        None)
    for o in parsed:
        key, text = o.key_or_group, o.input_line
        plus = o.type in (OverrideType.ADD, OverrideType.FORCE_ADD)
        if o.type == OverrideType.DEL or o.package is not None or o.is_sweep_override():
            problems.append(f"{text}: fp8spec emits only plain '[+]key=value' overrides")
            continue
        declared = key in keys or key in mappings
        if declared and plus:
            problems.append(f"{text}: {key} is declared in verl {verl_version}'s tree and must not carry '+'")
        elif not declared:
            if not plus:
                problems.append(f"{text}: {key} is not in verl {verl_version}'s composed tree; without '+' "
                                "Hydra rejects it ('Could not override')")
            parts = key.split(".")
            ancestor = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)
                             if ".".join(parts[:i]) in keys or ".".join(parts[:i]) in mappings), "")
            if ancestor and ancestor in keys:
                problems.append(f"{text}: cannot add under {ancestor}, a leaf of verl {verl_version}'s tree")
            if not any(key.startswith(p + ".") for p in passthrough):
                problems.append(f"{text}: {key} is not under a mapping verl passes through (open mappings or "
                                "hydra.plus_required_under); verl would reject or ignore it")
        value = o.value()
        if key == "model_engine" and value not in verl.data["config_groups"]["model_engine"]:
            problems.append(f"{text}: no model_engine option {value!r} in verl {verl_version}")
        if key.startswith(ENGINE_KWARGS + "."):
            problems += _check_engine_kwarg(c, key, value, rollout_name)
        if key == verl_profile.value("key.rollout_quantization") and value is not None:
            eng = snapshot(c.engine, c.version(c.engine))
            ok, detail = _confirm(eng, "choice", "quantization", value)
            if not ok:
                problems.append(f"{text}: verl passes quantization={value!r} to {c.engine} "
                                f"{c.version(c.engine)}, which does not accept it ({detail})")
            if value not in verl_profile.value("values.rollout_quantization").get(c.engine, []):
                problems.append(f"{text}: verl {verl_version} does not support {value!r} for {c.engine}")
        for fact_id in ("values.rollout_name", "values.rollout_is", "values.adv_estimator"):
            target = verl_profile.value("key." + fact_id.split(".", 1)[1])
            if key == target and value is not None and value not in verl_profile.value(fact_id):
                problems.append(f"{text}: {value!r} is not one of {verl_profile.value(fact_id)}")
        if key.startswith((TRANSFORMER_OVERRIDE + ".", OPTIMIZER_OVERRIDE + ".")):
            problems += _check_megatron_field(c, key, value)
        if key.startswith(ENV_VARS + "."):
            name = key[len(ENV_VARS) + 1:]
            if c.env.get(name) != str(value):
                problems.append(f"{text}: runtime_env.yaml sets {name}={c.env.get(name)!r}, "
                                f"the override {value!r}")
    env_keys = {o.key_or_group[len(ENV_VARS) + 1:] for o in parsed
                if o.key_or_group.startswith(ENV_VARS + ".")}
    if env_keys != set(c.env):
        problems.append(f"runtime_env.yaml env_vars {sorted(c.env)} differ from the Ray overrides "
                        f"{sorted(env_keys)}")
    return problems


def _check_engine_kwarg(c: Compiled, key: str, value: Any, rollout_name: Optional[str]) -> list[str]:
    rest = key[len(ENGINE_KWARGS) + 1:].split(".")
    engine, name = rest[0], rest[1] if len(rest) > 1 else ""
    if engine != rollout_name:
        return [f"{key}: engine_kwargs for {engine}, but the rollout engine is {rollout_name} "
                "(ignored by verl)"]
    version = c.version(engine)
    snap = snapshot(engine, version)
    ok, detail = _confirm(snap, "field", name)
    if not ok:
        return [f"{key}: {engine} {version} has no engine argument {name!r} ({detail})"]
    choices = snap.choices(name)
    if choices is not None and value not in choices:
        return [f"{key}={value!r}: not one of {engine} {version}'s {name} choices {choices}"]
    if engine == "vllm" and name == "hf_overrides":
        return check_hf_quantization_config(c, key, value)
    return []


#: The keys verl 0.9.1 itself puts in hf_overrides.quantization_config for FP8 rollouts
#: (verl/workers/rollout/vllm_rollout/vllm_async_server.py FP8_BLOCK_QUANT_KWARGS); fp8spec's replacement
#: (engine_kwargs.vllm.hf_overrides, which verl splats over its own) must keep that shape.
VERL_FP8_QUANT_KEYS = {"activation_scheme", "fmt", "quant_method", "weight_block_size", "ignored_layers"}


def check_hf_quantization_config(c: Compiled, key: str, value: Any) -> list[str]:
    from fp8spec.exclusions.ignore_lists import all_engine_names, engine_module_names

    problems: list[str] = []
    if set(value) != {"quantization_config"}:
        problems.append(f"{key}: replaces verl's hf_overrides, which holds only quantization_config; "
                        f"got {sorted(value)}")
    qc = value.get("quantization_config") or {}
    if set(qc) != VERL_FP8_QUANT_KEYS:
        problems.append(f"{key}.quantization_config: keys {sorted(qc)} differ from verl's "
                        f"{sorted(VERL_FP8_QUANT_KEYS)}")
    version = c.version("vllm")
    ok, detail = _confirm(snapshot("vllm", version), "choice", "quantization", qc.get("quant_method"))
    if not ok:
        problems.append(f"{key}.quantization_config.quant_method={qc.get('quant_method')!r}: {detail}")
    verl_block = load_profile("verl", c.version("verl")).value("capability.vllm_fp8_weight_block_size")
    if qc.get("weight_block_size") != verl_block:
        problems.append(f"{key}: weight_block_size {qc.get('weight_block_size')} != verl's quantizer "
                        f"{verl_block}")
    ignored = qc.get("ignored_layers") or []
    known = set(all_engine_names(c.ctx))
    unknown = [n for n in ignored if n not in known]
    if unknown:
        problems.append(f"{key}: ignored_layers {unknown[:4]} are not module names of {c.ctx.model.id}")
    if set(ignored) != set(engine_module_names(c.ctx)):
        problems.append(f"{key}: ignored_layers differ from the modules the spec keeps in BF16")
    return problems


def _check_megatron_field(c: Compiled, key: str, value: Any) -> list[str]:
    cls = "TransformerConfig" if key.startswith(TRANSFORMER_OVERRIDE + ".") else "OptimizerConfig"
    name = key.rsplit(".", 1)[-1]
    version = c.version("megatron-core")
    snap = snapshot("megatron-core", version)
    ok, detail = _confirm(snap, "field", f"{cls}.{name}")
    if not ok:
        return [f"{key}: megatron-core {version} {cls} has no field {name!r} ({detail})"]
    choices = snap.choices(f"{cls}.{name}")
    if choices is not None and value is not None and value not in choices:
        return [f"{key}={value!r}: not one of megatron-core {version} {cls}.{name} choices {choices}"]
    return []


# ----------------------------------------------------------------------------- Megatron / TE
def megatron_overrides(overrides: list[str]) -> tuple[dict, dict, dict]:
    """(TransformerConfig overrides, OptimizerConfig overrides, parallel sizes) from a verl bundle."""
    tc, opt, par = {}, {}, {}
    for o in parse_overrides(overrides):
        key = o.key_or_group
        if key.startswith(TRANSFORMER_OVERRIDE + "."):
            tc[key[len(TRANSFORMER_OVERRIDE) + 1:]] = o.value()
        elif key.startswith(OPTIMIZER_OVERRIDE + "."):
            opt[key[len(OPTIMIZER_OVERRIDE) + 1:]] = o.value()
        elif key.startswith("actor_rollout_ref.actor.megatron.") and key.endswith("_parallel_size"):
            par[key.rsplit(".", 1)[-1]] = o.value()
    return tc, opt, par


def model_config(model, par: dict) -> dict:
    """Model dimensions and parallel layout as verl/Megatron-Bridge hand them to TransformerConfig
    (sequence_parallel follows verl's engine default, True, when TP > 1; pipeline_dtype is the params dtype;
    linear biases as the checkpoint has them)."""
    import torch

    cfg = {
        "num_query_groups": model.num_key_value_heads,
        "kv_channels": model.head_dim,
        "ffn_hidden_size": model.intermediate_size,
        "add_bias_linear": bool(model.o_proj_bias),
        "add_qkv_bias": bool(model.qkv_bias),
        **par,
    }
    if par.get("tensor_model_parallel_size", 1) > 1:
        cfg["sequence_parallel"] = True
    if par.get("pipeline_model_parallel_size", 1) > 1:
        cfg["pipeline_dtype"] = torch.bfloat16
    if model.is_moe:
        cfg.update(num_moe_experts=model.num_experts, moe_router_topk=model.num_experts_per_tok,
                   moe_ffn_hidden_size=model.moe_intermediate_size)
    return cfg


@contextmanager
def te_version_seen_by_megatron(version: str):
    """Megatron gates FP8 features on the TransformerEngine version (``is_te_min_version``, e.g. MoE FP8
    training needs TE >= 1.7); without TE installed (CPU) it compares None and raises TypeError. Let it see
    the stack's TE release instead, for the duration of the check."""
    import megatron.core.utils as mcu
    from packaging.version import Version

    saved = mcu._te_version
    mcu._te_version = Version(version)
    try:
        yield
    finally:
        mcu._te_version = saved


def check_megatron(c: Compiled, overrides: Optional[list[str]] = None) -> list[str]:
    from fp8spec.trainers.megatron.config_check import check_te_recipe, validate_transformer_config

    tc, opt, par = megatron_overrides(overrides if overrides is not None else c.overrides)
    model = c.ctx.model
    dims = {"num_layers": model.num_hidden_layers, "hidden_size": model.hidden_size,
                "num_attention_heads": model.num_attention_heads, "model": model_config(model, par)}
    with te_version_seen_by_megatron(c.version("transformer-engine")):
        baseline = validate_transformer_config({}, **dims)
        assert baseline.ok, f"the model reconstruction itself fails Megatron's checks: {baseline.errors}"
        result = validate_transformer_config(tc, optimizer_overrides=opt or None, **dims)
    problems = [f"megatron-core {result.version}: {e}" for e in result.errors]
    if tc.get("fp8"):
        te = c.version("transformer-engine")
        problems += check_te_recipe(tc.get("fp8_recipe", "delayed"), te_snapshot=f"transformer-engine=={te}")
    return problems


# ----------------------------------------------------------------------------- serve bundles
def _arity(info: dict) -> str:
    if info.get("kind") in ("flag", "boolean_optional"):
        return "0"
    if info.get("nargs") in ("*", "+"):
        return "many"
    if info.get("nargs") == "?" or info.get("kind") == "optional_value":
        return "optional"
    return "1"


def check_argv(argv: list[str], engine: str, version: str, ctx=None) -> list[str]:
    """Every flag of a serve command against the engine version's snapshot (and profile for the prefix)."""
    problems: list[str] = []
    prof, snap = load_profile(engine, version), snapshot(engine, version)
    prefix = prof.value("cli.serve").split()
    if argv[: len(prefix)] != prefix:
        return [f"argv does not start with {engine} {version}'s entry point {prefix}: {argv[:len(prefix)]}"]
    rest = argv[len(prefix):]
    model_flag = prof.value("flag.model") if prof.has("flag.model") else None
    if isinstance(model_flag, dict) and model_flag.get("positional"):
        if not rest or rest[0].startswith("-"):
            problems.append(f"{engine} {version}: the model is positional and missing")
        else:
            rest = rest[1:]
    values_of: dict[str, list[str]] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if not token.startswith("-"):
            problems.append(f"stray argument {token!r}")
            continue
        flag, eq, inline = token.partition("=")
        info = snap.flag(flag)
        ok, detail = _confirm(snap, "flag", flag)
        if not ok:
            problems.append(f"{flag}: not accepted by {engine} {version} ({detail})")
            if not eq and i < len(rest) and not rest[i].startswith("-"):
                i += 1
            continue
        arity = _arity(info)
        values: list[str] = []
        if eq:
            values = [inline]
        elif arity == "1":
            if i >= len(rest):
                problems.append(f"{flag}: needs a value")
            else:
                values, i = [rest[i]], i + 1
        elif arity in ("many", "optional"):
            while i < len(rest) and not rest[i].startswith("-"):
                values.append(rest[i])
                i += 1
                if arity == "optional":
                    break
        if arity == "0" and eq:
            problems.append(f"{flag}: a switch, given a value")
        dest = info.get("dest") or flag.lstrip("-").replace("-", "_")
        values_of[dest] = values
        choices = info.get("choices") or snap.choices(dest)
        for v in values:
            if choices is not None and v not in choices:
                problems.append(f"{flag} {v}: not one of {engine} {version}'s choices {choices}")
        if info.get("kind") == "json":
            for v in values:
                try:
                    obj = json.loads(v)
                except ValueError as e:
                    problems.append(f"{flag}: not JSON ({e})")
                    continue
                if dest == "quantization_config":
                    problems += check_quantization_config(obj, engine, version, values_of.get("quantization"),
                                                          ctx)
    return problems


def check_quantization_config(obj: dict, engine: str, version: str, quantization, ctx=None) -> list[str]:
    """vLLM's --quantization-config: QuantizationConfigArgs fields, online shorthands, ignore patterns."""
    problems: list[str] = []
    prof, snap = load_profile(engine, version), snapshot(engine, version)
    fields = (snap.data.get("config_classes") or {}).get("QuantizationConfigArgs") or {}
    for k in obj:
        if k not in fields:
            problems.append(f"--quantization-config: {k!r} is not a QuantizationConfigArgs field in "
                            f"{engine} {version}")
    shorthands = snap.choices("quantization_online_shorthands") or []
    for k in ("linear", "moe"):
        if k in obj and obj[k] not in shorthands:
            problems.append(f"--quantization-config: {k}={obj[k]!r} is not an online shorthand of "
                            f"{engine} {version}")
    if quantization and quantization[0] not in shorthands + ["online"]:
        problems.append(f"--quantization-config needs an online --quantization, got {quantization[0]!r}")
    ignore_key = prof.value("quantization_config.ignore_key")
    patterns = obj.get(ignore_key, [])
    styles = prof.value("ignore.match")
    for p in patterns:
        style = pattern_style(p)
        if style not in styles:
            problems.append(f"ignore pattern {p!r} is {style}-style; {engine} {version} matches only "
                            f"{styles}")
        if style == "re:":
            try:
                re.compile(p[3:])
            except re.error as e:
                problems.append(f"ignore pattern {p!r} is not a valid regex ({e})")
    if ctx is not None and ctx.model is not None:
        from fp8spec.exclusions.ignore_lists import all_engine_names, engine_module_names

        wanted = set(engine_module_names(ctx))
        got = {n for n in all_engine_names(ctx) if any(ignored_by(p, n, styles) for p in patterns)}
        if got != wanted:
            problems.append(f"ignore patterns {patterns} keep {sorted(got - wanted)[:4]} in BF16 that "
                            f"the spec quantizes and miss {sorted(wanted - got)[:4]}")
    return problems


def pattern_style(pattern: str) -> str:
    if pattern.startswith("re:"):
        return "re:"
    if any(ch in pattern for ch in "*?["):
        return "fnmatch"
    return "exact"


def ignored_by(pattern: str, name: str, styles: list[str]) -> bool:
    """vLLM's should_ignore_layer on one (unfused) module name: exact, 're:' via re.match, fnmatch."""
    if "exact" in styles and pattern == name:
        return True
    if pattern.startswith("re:"):
        return "re:" in styles and re.match(pattern[3:], name) is not None
    return "fnmatch" in styles and fnmatch.fnmatchcase(name, pattern)


def check_serve(c: Compiled) -> list[str]:
    version = c.version(c.engine)
    problems = check_argv(c.argv, c.engine, version, c.ctx)
    import shlex

    script = c.files["serve.sh"]
    exec_line = next((ln for ln in script.splitlines() if ln.startswith("exec ")), "")
    words = shlex.split(exec_line)[1:]
    if words[: len(c.argv)] != c.argv:
        problems.append(f"serve.sh runs {words}, engine_args.json says {c.argv}")
    for name, _value in c.env.items():
        if f"export {name}=" not in script:
            problems.append(f"serve.sh does not export {name}")
    return problems


# ----------------------------------------------------------------------------- environment
def _env_reads_in(source: str) -> set[str]:
    """Names a module reads from the environment: os.environ.get / os.getenv / os.environ[...] with a string
    literal or a module-level constant, and ``X.read(...)`` of a variable X declared in fp8spec/runtime/envs.py."""
    tree = ast.parse(source)
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)
              and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    names: set[str] = set()

    def text(node) -> Optional[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return consts.get(node.id) or _MANIFEST_CONSTS.get(node.id)
        if isinstance(node, ast.Attribute):
            return _MANIFEST_CONSTS.get(node.attr)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "read":
            declared = ast.unparse(node.func.value).rsplit(".", 1)[-1]
            if declared in _ENV_NAMES:
                names.add(_ENV_NAMES[declared])
        if isinstance(node, ast.Call) and node.args:
            f = ast.unparse(node.func)
            if f in ("os.environ.get", "os.getenv", "environ.get", "getenv", "os.environ.setdefault"):
                t = text(node.args[0])
                if t:
                    names.add(t)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            t = text(node.slice)
            if t:
                names.add(t)
    return names


def _manifest_consts() -> dict[str, str]:
    import fp8spec.runtime.manifest as m

    return {k: v for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}


_MANIFEST_CONSTS = _manifest_consts()


def _env_names() -> dict[str, str]:
    """envs.py's declared variables: constant name -> variable name."""
    from fp8spec.runtime import envs

    return {k: v.name for k, v in vars(envs).items() if isinstance(v, envs.EnvVar)}


_ENV_NAMES = _env_names()


class _RecordingEnv(dict):
    """An empty environment that records every name looked up in it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


@lru_cache(maxsize=None)
def fp8spec_runtime_env() -> frozenset[str]:
    """Environment variables fp8spec.runtime reads: a static scan of its source for direct reads, and the names
    its settings objects (fp8spec/runtime/settings.py, where the patches' variables are read) look up in an
    environment, with every patch active."""
    from fp8spec.runtime.settings import KVSettings, QuantSettings

    root = REPO / "fp8spec" / "runtime"
    names: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        names |= _env_reads_in(path.read_text(encoding="utf-8"))
    env = _RecordingEnv()
    KVSettings.from_env(env)
    QuantSettings.from_env(frozenset(("ue8m0_scales", "fast_block_quant")), env)
    return frozenset(names | env.read)


@lru_cache(maxsize=None)
def verl_env(version: str) -> frozenset[str]:
    """Environment variables the installed verl release reads in its package __init__ (where
    VERL_USE_EXTERNAL_MODULES is read), after checking the installed release is ``version``."""
    from importlib.metadata import version as installed

    have = installed("verl")
    assert have == version, f"installed verl is {have}, the bundle targets {version}"
    spec = importlib.util.find_spec("verl")
    init = Path(spec.origin)
    return frozenset(_env_reads_in(init.read_text(encoding="utf-8")))


def check_env(c: Compiled) -> list[str]:
    problems: list[str] = []
    for name, value in sorted(c.env.items()):
        owner = name.split("_", 1)[0]
        if owner in ("VLLM", "SGLANG"):
            pkg = owner.lower()
            if pkg != c.engine:
                problems.append(f"{name}: a {pkg} variable in a {c.engine} bundle")
                continue
            version = c.version(pkg)
            info = snapshot(pkg, version).env(name)
            if info is None:
                problems.append(f"{name}: not read by {pkg} {version}")
            elif info.get("type") == "bool" and value not in ("0", "1"):
                problems.append(f"{name}={value!r}: {pkg} parses it as 0/1")
        elif owner == "NVTE":
            if c.trainer != "megatron":
                problems.append(f"{name}: TransformerEngine is not used by a {c.backend} bundle")
                continue
            version = c.version("transformer-engine")
            if snapshot("transformer-engine", version).env(name) is None:
                problems.append(f"{name}: not read by transformer-engine {version}")
        elif owner == "FP8SPEC":
            if name not in fp8spec_runtime_env():
                problems.append(f"{name}: not read by fp8spec.runtime")
            if name == _ENV_NAMES["RUNTIME_PATCHES"]:
                from fp8spec.runtime import manifest

                unknown = [p for p in value.split(",") if p not in manifest.PATCHES]
                if unknown:
                    problems.append(f"{name}: unknown patches {unknown}")
        elif owner == "VERL":
            if not c.trainer:
                problems.append(f"{name}: a verl variable in a standalone {c.engine} bundle")
                continue
            if name not in verl_env(c.version("verl")):
                problems.append(f"{name}: not read by verl {c.version('verl')}")
            if name == "VERL_USE_EXTERNAL_MODULES":
                for module in value.split(","):
                    if importlib.util.find_spec(module) is None:
                        problems.append(f"{name}: module {module!r} does not exist")
        else:
            problems.append(f"{name}: no known reader (not VLLM_/SGLANG_/NVTE_/FP8SPEC_/VERL_)")
    return problems


def _exports(script: str) -> dict[str, str]:
    """What launch.sh exports outside a Ray job (the FP8 environment; PYTHONPATH is the shipped lib/)."""
    import shlex

    out = {}
    for line in script.splitlines():
        line = line.strip()
        if line.startswith("export ") and not line.startswith("export PYTHONPATH="):
            name, _, value = line[len("export "):].partition("=")
            out[name] = " ".join(shlex.split(value)) if value else ""
    return out


def _job_checks(script: str) -> dict[str, str]:
    """What launch.sh requires of a Ray job's environment: `want=VALUE` then `[[ ${NAME-} == "$want" ]]` (the
    value in a variable, so the refusal message can name it without nesting quotes)."""
    import shlex

    out, want = {}, None
    for line in script.splitlines():
        m = re.match(r"^\s*want=(.*)$", line)
        if m:
            want = " ".join(shlex.split(m.group(1))) if m.group(1) else ""
            continue
        m = re.match(r'^\s*\[\[ \$\{([A-Za-z_][A-Za-z0-9_]*)-\} == "\$want" \]\] \\$', line)
        if m and want is not None:
            out[m.group(1)] = want
            want = None
    return out


def launch_ray_init(script: str) -> list[str]:
    """The overrides launch.sh adds outside a Ray job (ray_init+=(...) lines), as bash passes them."""
    import shlex

    words = []
    for line in script.splitlines():
        line = line.strip()
        if line.startswith("ray_init+=(") and line.endswith(")"):
            words += shlex.split(line[len("ray_init+=("):-1])
    return words


def check_launch(c: Compiled) -> list[str]:
    """launch.sh runs exactly the checked overrides with the checked environment (what the cluster sees)."""
    import shlex

    script = c.files["launch.sh"]
    problems = []
    start = script.find("\nexec ")
    if start < 0:
        return ["launch.sh has no exec line"]
    words = shlex.split(script[start + 1:].replace("\\\n", " "), comments=True)
    entry = load_profile("verl", c.version("verl")).value("entrypoint").split()
    if words[1: 1 + len(entry)] != entry:
        problems.append(f"launch.sh runs {words[1:1 + len(entry)]}, verl's entry point is {entry}")
    # always the exec line's overrides; outside a Ray job also the ray_init ones (py_modules and working_dir:
    # runtime paths, the working_dir the job's own, cluster.working_dir from the bundle folder)
    passed = [w for w in words[1 + len(entry):] if w not in ("$@", "${ray_init[@]+${ray_init[@]}}")]
    by_hand = [w for w in launch_ray_init(script)
               if "runtime_env.py_modules=" not in w and "runtime_env.working_dir=" not in w]
    working_dir = [w for w in launch_ray_init(script) if "runtime_env.working_dir=" in w]
    if working_dir != ["+ray_kwargs.ray_init.runtime_env.working_dir='$wd'"] or \
            f"\n  spec_wd={shell_word(c.spec.cluster.working_dir)}\n" not in script or \
            'cd -- "$spec_wd" 2>/dev/null &&' not in script:
        problems.append(f"launch.sh by hand gives Ray the working_dir {working_dir}, not cluster.working_dir "
                        f"{c.spec.cluster.working_dir!r} from the bundle folder")
    if passed + by_hand != c.overrides:
        problems.append("launch.sh passes other overrides than overrides.yaml: "
                        f"{sorted(set(passed + by_hand) ^ set(c.overrides))[:4]}")
    if _exports(script) != c.env:
        problems.append(f"launch.sh exports {_exports(script)}, runtime_env.yaml has {c.env}")
    if _job_checks(script) != c.env:
        problems.append(f"launch.sh requires {_job_checks(script)} inside a Ray job, runtime_env.yaml has {c.env}")
    return problems


# ----------------------------------------------------------------------------- spec intent
def check_kv_calibration(c: Compiled) -> list[str]:
    """An FP8 KV cache with recalibration gets a mechanism that exists in the targeted release: the engine's
    own calculate_kv_scales (confirmed by its snapshot) for 'once', else fp8spec's kv_scales runtime patch,
    activated (verl bundles). A standalone serve command has no weight sync to patch: there only the engine's
    own switch can calibrate, and it must be used where the release has it."""
    spec = c.spec
    if spec.kv_cache.dtype == "bf16" or spec.kv_cache.recalibrate == "none":
        return []
    version = c.version(c.engine)
    snap = snapshot(c.engine, version)
    native = _confirm(snap, "field", "calculate_kv_scales")[0]
    if not c.trainer:
        if native and "--calculate-kv-scales" not in c.argv:
            return [f"kv_cache.recalibrate {spec.kv_cache.recalibrate}: {c.engine} {version} has "
                    "--calculate-kv-scales, but the serve command does not use it"]
        return []
    key = f"{ENGINE_KWARGS}.{c.engine}.calculate_kv_scales"
    kwargs = {o.key_or_group: o.value() for o in parse_overrides(c.overrides)}
    if spec.kv_cache.recalibrate == "once" and kwargs.get(key) is True:
        return [] if native else [f"{key}: {c.engine} {version} has no calculate_kv_scales"]
    patches = c.env.get(_ENV_NAMES["RUNTIME_PATCHES"], "").split(",")
    modules = c.env.get("VERL_USE_EXTERNAL_MODULES", "").split(",")
    if "kv_scales" in patches and _MANIFEST_CONSTS["MODULE"] in modules:
        return []
    return [f"kv_cache.recalibrate {spec.kv_cache.recalibrate} on {c.engine} {version}: the bundle neither "
            "enables the engine's calculate_kv_scales nor activates the kv_scales runtime patch "
            "(scales stay 1.0)"]


# ----------------------------------------------------------------------------- everything
def check_bundle(c: Compiled) -> list[str]:
    problems = check_env(c) + check_kv_calibration(c)
    if c.trainer:
        problems += check_hydra(c) + check_launch(c)
        if c.trainer == "megatron":
            problems += check_megatron(c)
    else:
        problems += check_serve(c)
    return [f"{c.label}: {p}" for p in problems]
