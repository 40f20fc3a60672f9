"""Render a SettingsPlan into bundle files (text in memory; writing is fp8spec.compiler.writer's job).

Same spec and fp8spec version in, byte-identical files out: no timestamps, sorted keys, fixed order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fp8spec import __version__
from fp8spec.compiler.build import BackendChoice
from fp8spec.compiler.settings import SettingsPlan
from fp8spec.compiler.templates import render
from fp8spec.launchers import executable_files, get_launcher
from fp8spec.launchers.argv import check_arguments
from fp8spec.launchers.launch import launcher_files, readme_lines, runtime_env_yaml
from fp8spec.patchset import BUNDLE_LIB, shipped_files, shipped_fileset
from fp8spec.patchset import manifest as runtime_manifest
from fp8spec.plan.plan import plan_problem
from fp8spec.quoting import yaml_string_list
from fp8spec.resolve.reward import BUNDLE_NAME as REWARD_FILE
from fp8spec.resolve.valid import ValidSpec
from fp8spec.resources import data_dir
from fp8spec.rules.registry import all_rules
from fp8spec.runtime import envs
from fp8spec.targets import STACK_KINDS
from fp8spec.trainers import get_trainer

SPEC_COPY = "spec.yaml"
COMMANDS = {"launch.sh", "serve.sh"}  # and each launcher's file the table marks executable


def executable(files: dict[str, str]) -> frozenset[str]:
    """The bundle files written with the executable bit."""
    return frozenset(name for name in files if name in COMMANDS or name in executable_files())


def _checks(valid: ValidSpec, serve: bool) -> tuple[list[dict], list[dict]]:
    """The rules that judged the spec, with what they found, and the rules that could not (with why): a rule
    that did not run is never listed as passed. A rule of another engine is not about this spec, and a serve
    bundle lists only the rules that judge the engine alone."""
    by_code: dict[str, list] = {}
    for d in valid.diagnostics:
        by_code.setdefault(d.code, []).append(d)
    rows, skipped = [], []
    for rule in all_rules():
        if not rule.concerns(valid.resolved) or (serve and rule.scope != "engine"):
            continue
        reason = rule.skip_reason(valid.resolved)
        if reason is not None:
            skipped.append({"code": rule.code, "name": rule.name, "reason": reason})
            continue
        found = by_code.get(rule.code, [])
        status = "passed"
        if any(d.severity == "info" for d in found):
            status = "acknowledged"
        if any(d.severity == "warning" for d in found):
            status = "warning"
        rows.append(
            {"code": rule.code, "name": rule.name, "status": status, "messages": [d.message for d in found]}
        )
    return rows, skipped


_FP8_SOURCES = (
    "linear.",
    "kv_cache.",
    "correction.",
    "training.precision",
    "training.fp8_",
    "training.router_dtype",
    "rollout.calculate_log_probs",
)


def _fp8_table(plan: SettingsPlan) -> list[dict]:
    rows = []
    env_names = {s.key for s in plan.of("env")}
    for s in plan.settings:
        fp8_related = any(src.strip().startswith(_FP8_SOURCES) for src in s.source.split(","))
        if not fp8_related or s.layer == "ray_init":  # ray_init repeats an env var for launch.sh by hand
            continue
        mirrors_env = s.layer == "hydra" and s.key.rsplit(".", 1)[-1] in env_names
        if mirrors_env:
            continue
        where = {
            "hydra": "Hydra override",
            "env": "env var",
            "engine_arg": "engine flag",
            "patch": "runtime patch",
        }[s.layer]
        value = s.override if s.layer == "hydra" else f"{s.key}={s.value}" if s.layer != "patch" else s.key
        rows.append({"source": s.source, "where": where, "value": value, "why": s.why})
    return rows


def _unprofiled_packages(valid: ValidSpec, choice: BackendChoice) -> list[dict]:
    """Packages the run needs beside the pinned stack that have no fp8spec backend profile: the Megatron trainer's
    bridge (training.bridge; verl profile package.mbridge / package.megatron_bridge), which the preflight checks."""
    if choice.trainer is None or not get_trainer(choice.trainer).bridge:
        return []
    fact = "package.mbridge" if valid.spec.training.bridge == "mbridge" else "package.megatron_bridge"
    package = dict(valid.profile("verl").value(fact))
    return [
        {
            "name": package["name"],
            "version": package["version"],
            "why": f"training.bridge {valid.spec.training.bridge}",
        }
    ]


def bundle_files(
    valid: ValidSpec, choice: BackendChoice, plan: SettingsPlan, spec_file: str
) -> dict[str, str]:
    """File name -> content of the bundle (manifest.json last, with every other file's sha256)."""
    spec = valid.spec
    ctx = valid
    stack = valid.used_stack()
    if not choice.trainer:  # a standalone server runs the engine alone
        stack = {choice.engine: stack[choice.engine]}
    checks, skipped = _checks(valid, serve=choice.trainer is None)
    common = {
        "fp8spec_version": __version__,
        "spec": spec,
        "spec_file": spec_file,
        "backend": choice.name,
        "serve_bundle": choice.trainer is None,
        "plan": plan,
        "stack": stack,
        "unprofiled": _unprofiled_packages(valid, choice),
        "checks": checks,
        "skipped_checks": skipped,
        "memory_plan_problem": plan_problem(valid.resolved) if choice.trainer else None,
        "fp8_rows": _fp8_table(plan),
        "env": plan.env,
        "patches": plan.patches,
        "runtime": runtime_manifest(),
        "patches_variable": envs.RUNTIME_PATCHES.name,
        "model": ctx.model,
        "external_modules_env": ctx.profile("verl").value("env.external_modules"),
        "metrics": _metrics(ctx),
        "memory_plan": None,
        "reward_file": REWARD_FILE if choice.trainer and ctx.reward_file is not None else None,
        "kuberay_image": ctx.kuberay_image() if choice.trainer else None,
        "retargeted": valid.retargeted,
        "spec_backend": valid.spec_backend,
    }
    files: dict[str, str] = {}
    if choice.trainer:
        files.update(_memory_plan_files(valid, common))
    if choice.trainer:
        check_arguments(
            "launch.sh: the verl command", [*plan.entrypoint, *plan.overrides, *plan.ray_init_overrides]
        )
        files["launch.sh"] = render(
            "launch.sh.j2", ray_job_var=ctx.profile("verl").value("env.ray_job_config"), **common
        )
        files["overrides.yaml"] = (
            "# verl Hydra overrides, exactly as launch.sh passes them\n" + yaml_string_list(plan.overrides)
        )
        # outside a Ray job (launch.sh run by hand on a Ray head) verl's ray.init carries runtime_env.yaml
        added = [f"+{plan.working_dir_key}='<bundle>/{spec.cluster.working_dir}'"] + [
            f"+{plan.py_modules_key}=['<bundle>/{folder}']" for folder in plan.py_modules
        ]
        files["overrides.yaml"] += (
            "# and these only outside a Ray job (launch.sh run by hand on a Ray head), where verl's ray.init "
            "carries\n# runtime_env.yaml to the workers (launch.sh then also adds "
            + ", ".join(added)
            + ")\n"
            + (yaml_string_list(plan.ray_init_overrides) if plan.ray_init_overrides else "")
        )
        files["runtime_env.yaml"] = runtime_env_yaml(plan, spec.cluster.working_dir)
        if plan.py_modules:
            files.update({f"{BUNDLE_LIB}/{path}": text for path, text in shipped_files().items()})
        if ctx.reward_file is not None:
            # verl loads it relative to the Ray working_dir, which is the bundle folder (adapters/verl_run.py)
            files[REWARD_FILE] = ctx.reward_file.text
    else:
        check_arguments("serve.sh: the engine command", plan.entrypoint)
        files["serve.sh"] = render("serve.sh.j2", **common)
        files["engine_args.json"] = (
            json.dumps({"argv": plan.entrypoint, "env": plan.env}, indent=2, sort_keys=True) + "\n"
        )
    if choice.trainer:
        files.update(launcher_files(valid, choice.name, plan, files))
        common["launcher_run"] = get_launcher(spec.cluster.launcher).run
        common["launcher_lines"] = readme_lines(valid, choice.name, plan)
        common["ray_cpus"] = json.loads(files["preflight.json"])["ray_cpus"]
    # the spec itself, byte for byte as validated (manifest.json's spec.sha256 is this file's)
    files[SPEC_COPY] = valid.source_text
    files["README.md"] = render("bundle_README.md.j2", spec_copy=SPEC_COPY, **common)
    files["manifest.json"] = _manifest(valid, choice, plan, spec_file, stack, files)
    return files


def _memory_plan_files(valid: ValidSpec, common: dict) -> dict[str, str]:
    """The memory plan (fp8spec plan) for the README, and its picture as plan.svg (drawn without
    matplotlib, so the bundle is byte-identical everywhere)."""
    from fp8spec.plan.plan import spec_memory_plan
    from fp8spec.plan.render import render_text
    from fp8spec.plan.svg import plan_svg
    from fp8spec.rules.plan_columns import judged

    memory = spec_memory_plan(valid.resolved)
    if memory is None:
        return {}
    memory = judged(memory, valid.resolved)  # no expected gain for a column the rules refuse
    common["memory_plan"] = render_text(memory)
    return {"plan.svg": plan_svg(memory)}


def _metrics(valid: ValidSpec) -> dict:
    return valid.profile("verl").value("metrics.rollout_corr")


def _manifest(
    valid: ValidSpec,
    choice: BackendChoice,
    plan: SettingsPlan,
    spec_file: str,
    stack: dict[str, str],
    files: dict[str, str],
) -> str:
    profiles = {}
    for field, version in stack.items():
        kind = STACK_KINDS[field]
        prof = valid.profile(kind)
        profiles[kind] = {
            "version": version,
            "profile": f"backends/{kind}/{version}.yaml",
            "profile_sha256": _profile_sha(kind, version),
            "source": getattr(prof.source, "artifact", ""),
        }
    rt = runtime_manifest()
    data = {
        "fp8spec_version": __version__,
        "backend": choice.name,
        "spec": {"name": valid.spec.name, "file": Path(spec_file).name, "sha256": valid.sha256},
        "profiles": profiles,
        "runtime_patches": {
            "name": rt.PATCHSET_NAME,
            "version": rt.PATCHSET_VERSION,
            "patches": plan.patches,
            **(
                {"py_module": plan.py_modules[0], "fileset_sha256": shipped_fileset()["sha256"]}
                if plan.py_modules
                else {}
            ),
        },
        "files": {
            name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in sorted(files.items())
        },
    }
    if valid.retargeted:
        data["retargeted_from"] = valid.spec_backend
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _profile_sha(kind: str, version: str) -> str:
    path = data_dir("backends") / kind / f"{version}.yaml"
    return hashlib.sha256(path.read_bytes()).hexdigest()
