"""KubeRay: rayjob.yaml, a RayJob plus a ConfigMap of the bundle files it runs.

The head is a CPU pod that takes no Ray work; the one worker group has ``replicas = hardware.nodes`` pods of
``gpus_per_node`` GPUs each, so the GPU pods are exactly the spec's nodes (as on Slurm, where the head node also
holds GPUs). The image is the spec's, else verl's published image for the pinned engine version.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from fp8spec.launchers import get_launcher
from fp8spec.launchers.argv import check_arguments
from fp8spec.launchers.base import POD_SHM_VOLUME, BundleError
from fp8spec.launchers.launch import Launch, runtime_env_yaml
from fp8spec.preflight import program_files
from fp8spec.profiles.kubernetes import kubernetes_limit
from fp8spec.quoting import json_scalar, md_code, shell_word
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.specfile.model import Spec

LAUNCHER = get_launcher("kuberay")
KUBERAY_BUNDLE_DIR = "/fp8spec/bundle"
KUBERAY_TTL_SECONDS = 600
K8S_NAME_MAX = 47  # KubeRay: MaxRayJobNameLength = 53 (RayCluster) - 6 (generated suffix)


def render(launch: Launch) -> str | None:
    image = launch.valid.kuberay_image()
    if image is None:  # the launcher is not kuberay (else rule CLU001) and no image is known: no rayjob.yaml
        return None
    return _rayjob(launch.valid.spec, launch.plan, launch.files, image, launch.valid.sha256, launch.common)


def readme(launch: Launch) -> str:
    spec, valid = launch.valid.spec, launch.valid
    image = valid.kuberay_image()
    if image is None:
        engine = valid.engine.name
        return (
            f"not generated: verl publishes no image for {engine}\n    {valid.engine_version}; set "
            "`cluster.kuberay.image` to an image with the pinned stack"
        )
    kuberay, hw = spec.cluster.kuberay, spec.hardware
    volumes = ""
    if kuberay.volumes:
        volumes = ", volumes at\n" + ", ".join(md_code(v.mount_path) for v in kuberay.volumes)
    trainer_packages = ""
    trainer = launch.backend.rpartition("+")[0]  # "" for a serve bundle: no trainer
    if trainer and get_trainer(trainer).stack_fields and not kuberay.image:
        # verl documents its published images for the rollout engine; the Megatron trainer's packages are
        # checked, not assumed: the preflight refuses an image without them before training starts
        trainer_packages = (
            "; the image must also hold the Megatron trainer's\n    packages at the pinned versions "
            "(megatron-core, transformer-engine and the `training.bridge` package: the\n    preflight checks "
            "them), which verl does not document for its engine images: set `cluster.kuberay.image` to one "
            "that has them"
        )
    return (
        f"a KubeRay RayJob (and a ConfigMap with the files it runs) in namespace\n    {md_code(kuberay.namespace)}: a CPU "
        f"head pod and {hw.nodes} GPU worker pod(s) of\n    {hw.gpus_per_node} `nvidia.com/gpu` each, image "
        f"{md_code(image)}{volumes}; the entrypoint runs the preflight,\n    then `launch.sh`{trainer_packages}"
    )


def k8s_name(name: str) -> str:
    """A DNS-1035 label of at most 47 characters (a KubeRay RayJob name) from a spec name. A name that had to
    change ('a_b', 'a.b' -> 'a-b') gets a digest of the spec name, so that two specs never map to one
    RayJob (kubectl apply of one would replace the other)."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not text or not text[0].isalpha():
        text = "fp8-" + text
    if text != name and len(text) <= K8S_NAME_MAX:
        text = (
            text[: K8S_NAME_MAX - 7].rstrip("-") + "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:6]
        )
    if len(text) > K8S_NAME_MAX:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:6]
        text = text[: K8S_NAME_MAX - 7].rstrip("-") + "-" + digest
    return text.rstrip("-")


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


def _check_secret_env(spec: Spec, plan: SettingsPlan) -> None:
    """A Secret may not supply a name the bundle sets for every Ray worker: a pod-level value would silently fight
    the recipe's (names the process, Ray or the GPU assignment own are refused where typed: EnvName)."""
    if spec.cluster.launcher != "kuberay":
        return
    bundle_env = {s.key for s in plan.of("env")}
    for i, e in enumerate(spec.cluster.kuberay.secret_env):
        if e.env in bundle_env:
            owner = "the bundle sets it for every Ray worker (runtime_env.yaml)"
            raise BundleError(
                f"cluster.kuberay.secret_env[{i}].env {e.env}: {owner}; take the Secret under another name"
            )


EXTRA_OVERRIDES = "extra_overrides.sh"


def _extra_overrides_script(launch: list[str]) -> str:
    words = " \\\n  ".join(shell_word(w) for w in launch)
    return (
        "# cluster.kuberay.extra_overrides, passed to launch.sh as its arguments (after fp8spec's, so they win).\n"
        "# A script, not the RayJob entrypoint: Ray runs that as one argument of sh -c, and Linux caps one\n"
        "# argument at 128 KiB.\n"
        f"exec {words}\n"
    )


def _rayjob(spec: Spec, plan: SettingsPlan, files: dict[str, str], image: str, sha: str, common: dict) -> str:
    from fp8spec.compiler.templates import render
    from fp8spec.patchset import BUNDLE_LIB
    from fp8spec.resolve.reward import BUNDLE_NAME as REWARD_FILE

    kuberay = spec.cluster.kuberay
    name = k8s_name(spec.name)
    shipped = {path: text for path, text in files.items() if path.startswith(BUNDLE_LIB + "/")}
    launch = ["bash", "launch.sh", *kuberay.extra_overrides]
    check_arguments("rayjob.yaml: launch.sh (cluster.kuberay.extra_overrides)", launch)
    # Ray runs the entrypoint as one argument of `sh -c`: the overrides, any size the spec allows, go in a
    # script in the ConfigMap, each its own argument there.
    extra = {EXTRA_OVERRIDES: _extra_overrides_script(launch)} if kuberay.extra_overrides else {}
    entrypoint = (
        f"python3 preflight.py && bash {EXTRA_OVERRIDES}"
        if extra
        else "python3 preflight.py && bash launch.sh"
    )
    check_arguments("rayjob.yaml: the entrypoint (sh -c)", [entrypoint])
    bundle = {
        **extra,
        "launch.sh": files["launch.sh"],
        "preflight.json": files["preflight.json"],
        **{name: files[name] for name in program_files()},  # preflight.py and the modules beside it
        **shipped,
        # the custom reward file is loaded relative to the working_dir (this ConfigMap)
        **{path: files[path] for path in (REWARD_FILE,) if path in files},
    }
    size = sum(len(text.encode("utf-8")) for text in bundle.values())
    limit = kubernetes_limit("configmap_max_bytes")
    if size > limit and spec.cluster.launcher == "kuberay":
        raise BundleError(
            f"rayjob.yaml: the ConfigMap of bundle files would hold {size} bytes and Kubernetes refuses more "
            f"than {limit} (backends/kubernetes/limits.yaml); make reward.custom_function.path smaller "
            f"(it is {len(files.get(REWARD_FILE, '').encode('utf-8'))} bytes) or use another launcher"
        )
    _check_secret_env(spec, plan)
    return render(
        LAUNCHER.template,
        name=name,
        configmap=f"{name}-bundle",
        namespace=kuberay.namespace,
        kuberay=kuberay,
        image=image,
        spec_sha256=sha,
        bundle_dir=KUBERAY_BUNDLE_DIR,
        configmap_files={configmap_key(path): (path, text) for path, text in bundle.items()},
        entrypoint=entrypoint,
        runtime_env_yaml=runtime_env_yaml(plan, KUBERAY_BUNDLE_DIR, KUBERAY_BUNDLE_DIR, comment=False).rstrip(
            "\n"
        ),
        ttl_seconds=KUBERAY_TTL_SECONDS,
        head_pod=_pod_yaml(kuberay, 10, [], []),
        worker_pod=_pod_yaml(
            kuberay,
            12,
            [f"{{name: {json_scalar(POD_SHM_VOLUME[0])}, mountPath: {json_scalar(POD_SHM_VOLUME[1])}}}"],
            [f'{{name: {json_scalar(POD_SHM_VOLUME[0])}, emptyDir: {{medium: "Memory"}}}}'],
        ),
        **common,
    )
