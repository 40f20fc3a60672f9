"""Read a compiled bundle back the way its consumers do and compare it with the spec and the plan.

YAML files through a YAML 1.1 reader (PyYAML, as Kubernetes tooling) and a YAML 1.2 reader (ruamel), which
must agree; JSON files through json; shell files through bash itself (launch.sh/serve.sh run with `exec`
redefined to print the words it would run; submit.sh's settings evaluated by bash); #SBATCH lines split the
way sbatch splits them; Hydra overrides through Hydra's own parser. Returns a list of problems.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import yaml as pyyaml
from ruamel.yaml import YAML

from fp8spec.launchers.kuberay import KUBERAY_BUNDLE_DIR

YAML_FILES = ("overrides.yaml", "runtime_env.yaml", "rayjob.yaml")
JSON_FILES = ("preflight.json", "manifest.json", "engine_args.json")
SHELL_FILES = ("launch.sh", "serve.sh", "submit.sh", "slurm.sbatch")


def read_yaml_both(text: str) -> tuple[list, list]:
    """(YAML 1.1 documents, YAML 1.2 documents)."""
    v11 = list(pyyaml.safe_load_all(text))
    v12 = list(YAML(typ="safe", pure=True).load_all(text))
    return v11, v12


def _run_bash(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})


def exec_words(script_name: str, folder: Path) -> tuple[list[str], dict[str, str]]:
    """The words a generated script would `exec`, and the environment it exports, as bash sees them."""
    # launch.sh by hand first asks a Ray cluster for its CPUs (python3 preflight.py --ray-cpus-only): not this
    # oracle's subject (tests/launchers/test_ray_cpu_preflight.py is), so python3 answers yes here
    probe = (
        'exec() { printf "%s\\0" "$@" > .argv; env -0 > .env; }\n'
        "python3() { return 0; }\n"
        f"source ./{script_name}\n"
    )
    proc = _run_bash(probe, folder)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    argv = (folder / ".argv").read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
    items = (folder / ".env").read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
    env = dict(item.split("=", 1) for item in items if "=" in item)
    return argv, env


def shell_assignments(script: str, names: list[str], folder: Path) -> dict[str, str]:
    """Evaluate the script's top-level `name=...` lines for ``names`` with bash."""
    lines = [ln for ln in script.splitlines() if re.match(rf"^({'|'.join(names)})=", ln)]
    printer = "".join(f'printf "%s\\0" "${n}";' for n in names)
    proc = _run_bash("\n".join(lines) + "\n" + printer, folder)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return dict(zip(names, proc.stdout.decode("utf-8", "surrogateescape").split("\0")))


def sbatch_directives(script: str) -> list[str]:
    """The words of the #SBATCH lines before the first command, as sbatch collects them (opt.c)."""
    words = []
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            words += line[len("#SBATCH"):].split()
    return words


def _expected_image(spec, choice) -> str:
    """The spec's image, else verl's published image for the pinned engine (profile fact images.kuberay)."""
    if spec.cluster.kuberay.image:
        return spec.cluster.kuberay.image
    from fp8spec.profiles import load_profile

    engine = choice.engine
    return load_profile("verl", spec.stack.verl).value("images.kuberay")[f"{engine}=={getattr(spec.stack, engine)}"]


def check_bundle(spec, plan, choice, files: dict[str, str]) -> list[str]:
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)  # lib/fp8spec/... (the shipped patch set)
            (folder / name).write_text(text, encoding="utf-8")
        for name in YAML_FILES:
            if name in files:
                v11, v12 = read_yaml_both(files[name])
                if v11 != v12:
                    problems.append(f"{name}: YAML 1.1 and 1.2 readers disagree")
        for name in SHELL_FILES:
            if name in files:
                proc = subprocess.run(["bash", "-n", str(folder / name)], capture_output=True, text=True)
                if proc.returncode:
                    problems.append(f"{name}: bash -n: {proc.stderr.strip()}")
        data = {name: json.loads(files[name]) for name in JSON_FILES if name in files}
        sums = data["manifest.json"]["files"]
        for name, text in files.items():
            if name != "manifest.json" and sums.get(name) != hashlib.sha256(text.encode()).hexdigest():
                problems.append(f"manifest.json: sha256 of {name} does not match")
        if choice.trainer:
            problems += _trainer(spec, plan, files, data, folder, choice)
        else:
            argv, env = exec_words("serve.sh", folder)
            if argv != plan.entrypoint:
                problems.append(f"serve.sh runs {argv!r}, the plan says {plan.entrypoint!r}")
            if any(env.get(k) != v for k, v in plan.env.items()):
                problems.append("serve.sh exports another environment than the plan")
            if data["engine_args.json"] != {"argv": plan.entrypoint, "env": plan.env}:
                problems.append("engine_args.json differs from the plan")
    return problems


def _trainer(spec, plan, files, data, folder, choice) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    problems = []
    overrides = pyyaml.safe_load(files["overrides.yaml"])
    if overrides != plan.overrides + plan.ray_init_overrides:
        problems.append("overrides.yaml does not list the plan's overrides")
    parser = OverridesParser.create()
    for setting in plan.of("hydra"):
        parsed = parser.parse_override(setting.override)
        if parsed.value() != setting.value or parsed.key_or_group != setting.key:
            problems.append(f"Hydra reads {setting.override!r} as {parsed.key_or_group}={parsed.value()!r}")
    # run outside a Ray job, launch.sh adds the ray.init runtime env, the job's working_dir (cluster.working_dir
    # from the bundle folder, as bash resolves it) and the shipped patch set, both as absolute paths
    found = _run_bash(f"cd -- {shlex.quote(spec.cluster.working_dir)} && pwd -P", folder)
    wd = found.stdout.decode("utf-8", "surrogateescape").removesuffix("\n")
    if found.returncode or any(ch in wd for ch in "'\\$"):  # no such folder, or one Hydra cannot quote
        proc = _run_bash("source ./launch.sh", folder)
        if proc.returncode != 2 or not proc.stderr.startswith(b"launch.sh: ") or proc.stderr.count(b"\n") != 1:
            problems.append(f"launch.sh with working_dir {spec.cluster.working_dir!r}: no one-line refusal, exit 2")
        return problems
    argv, env = exec_words("launch.sh", folder)
    outside_job = plan.ray_init_overrides + [f"+{plan.working_dir_key}='{wd}'"] + (
        [f"+{plan.py_modules_key}=['{folder.resolve() / plan.py_modules[0]}']"] if plan.py_modules else [])
    if argv != plan.entrypoint + plan.overrides + outside_job:
        problems.append("launch.sh runs other words than the entry point and overrides.yaml")
    if any(env.get(k) != v for k, v in plan.env.items()):
        problems.append("launch.sh exports another environment than the plan")
    runtime_env = pyyaml.safe_load(files["runtime_env.yaml"])
    shipped = {"py_modules": list(plan.py_modules)} if plan.py_modules else {}
    if runtime_env != {"working_dir": spec.cluster.working_dir, **shipped, "env_vars": plan.env}:
        problems.append(f"runtime_env.yaml reads back as {runtime_env!r}")
    pre = data["preflight.json"]
    if (pre["model"]["path"], pre["model"]["name"], pre["env"]) != (spec.model.path, spec.model.name,
                                                                     plan.env):
        problems.append("preflight.json does not carry the spec's model and the plan's environment")
    submit = shell_assignments(files["submit.sh"], ["address", "working_dir"], folder)
    if submit != {"address": spec.cluster.address, "working_dir": spec.cluster.working_dir}:
        problems.append(f"submit.sh sets {submit!r}")
    problems += _rayjob(spec, plan, files, choice)
    problems += _sbatch(spec, files["slurm.sbatch"])
    return problems


def _rayjob(spec, plan, files, choice) -> list[str]:
    docs, _ = read_yaml_both(files["rayjob.yaml"])
    if [d.get("kind") for d in docs] != ["ConfigMap", "RayJob"]:
        return [f"rayjob.yaml holds {[d.get('kind') for d in docs]}, not a ConfigMap and a RayJob"]
    configmap, job = docs
    problems = []
    for name in ("launch.sh", "preflight.json", "preflight.py", "preflight_cpus.py", "preflight_checks.py"):
        if configmap["data"][name] != files[name]:
            problems.append(f"rayjob.yaml's ConfigMap carries another {name}")
    pod_specs = [job["spec"]["submitterPodTemplate"]["spec"],
                 job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"],
                 job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]]
    images = {c["image"] for pod in pod_specs for c in pod["containers"]}
    if images != {_expected_image(spec, choice)}:
        problems.append(f"rayjob.yaml runs images {images!r}")
    if {configmap["metadata"]["namespace"], job["metadata"]["namespace"]} != {spec.cluster.kuberay.namespace}:
        problems.append("rayjob.yaml's namespace is not the spec's")
    runtime_env = read_yaml_both(job["spec"]["runtimeEnvYAML"])
    shipped = {"py_modules": [f"{KUBERAY_BUNDLE_DIR}/{m}" for m in plan.py_modules]} if plan.py_modules else {}
    if runtime_env[0] != runtime_env[1] or runtime_env[0] != [{"working_dir": KUBERAY_BUNDLE_DIR, **shipped,
                                                               "env_vars": plan.env}]:
        problems.append("rayjob.yaml's runtimeEnvYAML reads back differently")
    return problems


def _sbatch(spec, script: str) -> list[str]:
    s, hw = spec.cluster.slurm, spec.hardware
    expected = [f"--job-name={spec.name}", f"--nodes={hw.nodes}", "--ntasks-per-node=1",
                f"--gpus-per-node={hw.gpus_per_node}", "--exclusive", f"--time={s.time_limit}"]
    expected += [f"--partition={s.partition}"] if s.partition else []
    expected += [f"--account={s.account}"] if s.account else []
    expected += ["--output=../%x-%j.out"]  # Slurm's log beside the bundle, not in it
    expected += list(s.extra_sbatch)
    words = sbatch_directives(script)
    return [] if words == expected else [f"slurm.sbatch's #SBATCH words are {words!r}, expected {expected!r}"]
