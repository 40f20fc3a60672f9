"""Cluster launchers of a trainer bundle: the preflight and the three ways to start the run.

Every trainer bundle gets all of them, whichever ``cluster.launcher`` the spec names (the README says which
one it chose): the cluster section is where the run goes today, and moving it should not need a new
compile. Files, all rendered through templates/ with strict undefined variables:

- ``preflight.py`` + ``preflight.json``: the self-contained check (fp8spec/preflight/preflight.py) and the
  values it expects (pins, env vars, GPU, CUDA, model facts).
- ``submit.sh``: ``ray job submit`` of the preflight job, then of launch.sh when it passed.
- ``slurm.sbatch``: a Ray cluster over ``hardware.nodes`` Slurm nodes (head on the batch node, one worker per
  other node), then submit.sh, then teardown.
- ``rayjob.yaml``: a KubeRay RayJob (+ a ConfigMap with the files it runs). The head is a CPU pod that takes
  no Ray work; the one worker group has ``replicas = hardware.nodes`` pods of ``gpus_per_node`` GPUs each,
  so the GPU pods are exactly the spec's nodes (as on Slurm, where the head node also holds GPUs).

The submission id is deterministic: ``fp8spec-<spec name>-<backend>-<first 12 hex of the spec sha256>``
(the preflight's adds ``-preflight``), so the same spec cannot be submitted twice to one cluster by accident.
"""

from __future__ import annotations

import hashlib
import json
import re

from fp8spec import __version__
from fp8spec.compiler.build import BackendChoice
from fp8spec.compiler.plan import Plan
from fp8spec.compiler.quoting import json_scalar, shell_word, yaml_string_list, yaml_string_map
from fp8spec.compiler.templates import render
from fp8spec.hardware import gpu as gpu_facts
from fp8spec.patchset import BUNDLE_LIB, shipped_fileset
from fp8spec.preflight import program_text
from fp8spec.resolve.reward import BUNDLE_NAME as REWARD_FILE
from fp8spec.resolve.valid import ValidSpec
from fp8spec.specfile.model import Spec
from fp8spec.targets import STACK_KINDS

PREFLIGHT_FORMAT = 2
RAY_PORT = 6379
DASHBOARD_PORT = 8265
KUBERAY_BUNDLE_DIR = "/fp8spec/bundle"
KUBERAY_TTL_SECONDS = 600
K8S_NAME_MAX = 47  # KubeRay: MaxRayJobNameLength = 53 (RayCluster) - 6 (generated suffix)


def runtime_env_yaml(plan: Plan, working_dir: str, bundle_dir: str = "", comment: bool = True) -> str:
    """The one place the bundle's Ray runtime environment is written: every job gets it (submit.sh,
    slurm.sbatch through submit.sh, rayjob.yaml), and launch.sh run by hand passes the same to ray.init.
    ``bundle_dir``: where the bundle sits for the submitting `ray` (empty: its working directory)."""
    text = (
        (
            "# Ray runtime environment of the preflight and training jobs: "
            "ray job submit --runtime-env runtime_env.yaml\n"
        )
        if comment
        else ""
    )
    text += f"working_dir: {json_scalar(working_dir)}\n"
    if plan.py_modules:
        folders = [f"{bundle_dir}/{f}" if bundle_dir else f for f in plan.py_modules]
        text += "py_modules:\n" + yaml_string_list(folders, indent=2)
    return text + "env_vars:\n" + yaml_string_map(plan.env, indent=2)


def submission_id(spec_name: str, backend: str, spec_sha256: str) -> str:
    return f"fp8spec-{spec_name}-{backend.replace('+', '-')}-{spec_sha256[:12]}"


def k8s_name(name: str) -> str:
    """A DNS-1035 label of at most 47 characters (a KubeRay RayJob name) from a spec name."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not text or not text[0].isalpha():
        text = "fp8-" + text
    if len(text) > K8S_NAME_MAX:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:6]
        text = text[: K8S_NAME_MAX - 7].rstrip("-") + "-" + digest
    return text.rstrip("-")


def data_files(spec: Spec) -> list[str]:
    """Every data file the run reads (train, then validation), as the spec names them."""
    out: list[str] = []
    for value in (spec.data.train_files, spec.data.val_files):
        if value is not None:
            out += [value] if isinstance(value, str) else list(value)
    return list(dict.fromkeys(out))


def preflight_expected(valid: ValidSpec, choice: BackendChoice, plan: Plan) -> dict:
    """What preflight.py checks on every node (written as preflight.json)."""
    spec = valid.spec
    hw = spec.hardware
    target = gpu_facts(hw.gpu)
    packages = []
    for field, version in valid.used_stack().items():
        name = STACK_KINDS[field]
        packages.append(
            {
                "name": name,
                "version": version,  # the installed names to try, first found wins
                "distributions": valid.profile(name).value("package.distributions"),
            }
        )
    if choice.trainer == "fsdp" and spec.training.attention == "flash_attention_2":
        packages.append(dict(valid.profile("verl").value("package.flash_attention_2")))
    model = valid.model
    config = {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_hidden_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "num_experts": model.num_experts,
        "vocab_size": model.vocab_size,
    }
    return {
        "format": PREFLIGHT_FORMAT,
        "fp8spec_version": __version__,
        "spec": {"name": spec.name, "sha256": valid.sha256},
        "backend": choice.name,
        "submission_id": submission_id(spec.name, choice.name, valid.sha256),
        "hardware": {
            "gpu": hw.gpu,
            "device_name": hw.gpu.upper(),
            "compute_capability": target.cc_text,
            "arch": target.arch,
            "nodes": hw.nodes,
            "gpus_per_node": hw.gpus_per_node,
            "cuda": hw.cuda,
        },
        "packages": packages,
        "env": dict(plan.env),
        # the patch set the workers must import: the exact files the bundle ships in lib/ (no pip step)
        "runtime": ({**shipped_fileset(), "patches": plan.patches} if plan.py_modules else None),
        "model": {
            "name": spec.model.name,
            "path": spec.model.path,
            "from_hub": spec.model.from_hub,
            "config": config,
        },
        "data": {"files": data_files(spec)},
    }


def launcher_files(
    valid: ValidSpec, choice: BackendChoice, plan: Plan, files: dict[str, str]
) -> dict[str, str]:
    """The launcher files of a trainer bundle (none for a standalone serve bundle).

    ``files`` are the bundle files rendered so far; rayjob.yaml's ConfigMap carries launch.sh from them.
    """
    if not choice.trainer:
        return {}
    spec = valid.spec
    cluster = spec.cluster
    sha = valid.sha256
    sub_id = submission_id(spec.name, choice.name, sha)
    common = {
        "spec": spec,
        "backend": choice.name,
        "fp8spec_version": __version__,
        "submission_id": sub_id,
        "nodes": spec.hardware.nodes,
        "gpus_per_node": spec.hardware.gpus_per_node,
        "working_dir": cluster.working_dir,
    }
    out: dict[str, str] = {}
    out["preflight.py"] = program_text()
    expected = preflight_expected(valid, choice, plan)
    out["preflight.json"] = json.dumps(expected, indent=2, sort_keys=True) + "\n"
    out["submit.sh"] = render("submit.sh.j2", address=cluster.address, **common)
    out["slurm.sbatch"] = render(
        "slurm.sbatch.j2",
        slurm=cluster.slurm,
        job_name=spec.name,
        ray_port=RAY_PORT,
        dashboard_port=DASHBOARD_PORT,
        **common,
    )
    image = valid.kuberay_image()
    if (
        image is not None
    ):  # else the launcher is not kuberay (rule CLU001) and no image is known: no rayjob.yaml
        out["rayjob.yaml"] = _rayjob(spec, plan, files, out, image, sha, common)
    return out


def configmap_key(path: str) -> str:
    """A ConfigMap key for a bundle file (keys allow only [-._a-zA-Z0-9]; the mount restores the path)."""
    return path.replace("/", "--")


def _pod_yaml(kuberay, indent: int, mounts: list[str], volumes: list[str]) -> str:
    """The container's env and volumeMounts (at ``indent + 4``) and the pod's volumes (at ``indent``): secrets
    by name, the spec's volumes, and ``mounts``/``volumes`` of the pod itself (flow-style YAML items)."""
    pad, cpad = " " * indent, " " * (indent + 4)
    lines = []
    if kuberay.secret_env:
        lines.append(f"{cpad}env:")
        for e in kuberay.secret_env:
            lines.append(f"{cpad}  - name: {json_scalar(e.env)}")
            lines.append(
                f"{cpad}    valueFrom: {{secretKeyRef: {{name: {json_scalar(e.secret)}, "
                f"key: {json_scalar(e.key)}}}}}"
            )
    mounts = mounts + [
        f"{{name: {json_scalar(v.name)}, mountPath: {json_scalar(v.mount_path)}, "
        f"readOnly: {json_scalar(v.read_only)}}}"
        for v in kuberay.volumes
    ]
    if mounts:
        lines.append(f"{cpad}volumeMounts:")
        lines += [f"{cpad}  - {m}" for m in mounts]
    for v in kuberay.volumes:
        if v.host_path:
            source = f'hostPath: {{path: {json_scalar(v.host_path)}, type: "Directory"}}'
        else:
            source = (
                f"persistentVolumeClaim: {{claimName: {json_scalar(v.pvc)}, "
                f"readOnly: {json_scalar(v.read_only)}}}"
            )
        volumes = volumes + [f"{{name: {json_scalar(v.name)}, {source}}}"]
    if volumes:
        lines.append(f"{pad}volumes:")
        lines += [f"{pad}  - {v}" for v in volumes]
    return "\n".join(lines)


def _rayjob(
    spec: Spec, plan: Plan, files: dict[str, str], out: dict[str, str], image: str, sha: str, common: dict
) -> str:
    kuberay = spec.cluster.kuberay
    name = k8s_name(spec.name)
    shipped = {path: text for path, text in files.items() if path.startswith(BUNDLE_LIB + "/")}
    bundle = {
        "launch.sh": files["launch.sh"],
        "preflight.json": out["preflight.json"],
        "preflight.py": out["preflight.py"],
        **shipped,
        # the custom reward file is loaded relative to the working_dir (this ConfigMap)
        **{path: files[path] for path in (REWARD_FILE,) if path in files},
    }
    launch = " ".join(["bash", "launch.sh", *(shell_word(o) for o in kuberay.extra_overrides)])
    return render(
        "rayjob.yaml.j2",
        name=name,
        configmap=f"{name}-bundle",
        namespace=kuberay.namespace,
        kuberay=kuberay,
        image=image,
        spec_sha256=sha,
        bundle_dir=KUBERAY_BUNDLE_DIR,
        configmap_files={configmap_key(path): (path, text) for path, text in bundle.items()},
        entrypoint=f"python3 preflight.py && {launch}",
        runtime_env_yaml=runtime_env_yaml(plan, KUBERAY_BUNDLE_DIR, KUBERAY_BUNDLE_DIR, comment=False).rstrip(
            "\n"
        ),
        ttl_seconds=KUBERAY_TTL_SECONDS,
        head_pod=_pod_yaml(kuberay, 10, [], []),
        worker_pod=_pod_yaml(
            kuberay,
            12,
            ['{name: "dshm", mountPath: "/dev/shm"}'],
            ['{name: "dshm", emptyDir: {medium: "Memory"}}'],
        ),
        **common,
    )
