"""Spec sections of the launch: Ray job submission, Slurm and KubeRay settings."""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal, Optional
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from fp8spec.launchers import launcher_names, launchers
from fp8spec.launchers.base import POD_SHM_VOLUME
from fp8spec.profiles.kubernetes import reserved_pod_env
from fp8spec.specfile.fields import PathText, Section, Version, either, how_many, plain_text
from fp8spec.specfile.paths import is_root, lexical

LAUNCHERS = launcher_names()  # the table in fp8spec/launchers/

# Each is NonEmpty (no control characters, no '${') with a pattern; the pattern stays visible in the JSON Schema.


# Written into #SBATCH lines (sbatch parses them itself): no blanks, quotes, '$' or backslashes.
SlurmName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.,:+-]+$"),
    AfterValidator(plain_text),
]
SbatchOption = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=200, pattern=r"^--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=+/@%&|!*\[\]-]+)?$"
    ),
    AfterValidator(plain_text),
]
K8sLabel = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
    AfterValidator(plain_text),
]
K8sQuantity = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=32, pattern=r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"
    ),
    AfterValidator(plain_text),
]


class SlurmSettings(Section):
    partition: Optional[SlurmName] = Field(
        None, description="Slurm partition (#SBATCH --partition). Default: the cluster's default partition."
    )
    account: Optional[SlurmName] = Field(
        None, description="Slurm account (#SBATCH --account). Default: the user's default account."
    )
    time_limit: Annotated[str, StringConstraints(pattern=r"^([0-9:-]{1,16}|[A-Za-z]{1,16})$")] = Field(
        "24:00:00",
        description="Wall-clock limit of the job (#SBATCH --time), e.g. 48:00:00 or 2-00:00:00, in a form "
        "sbatch accepts (rule LCH002). Default 24:00:00.",
    )
    extra_sbatch: list[SbatchOption] = Field(
        default_factory=list,
        description="More #SBATCH options, one '--name=value' each, names in full (e.g. --qos=high, "
        "--mem=0). Nodes, GPUs, tasks, --exclusive, partition, account, time and job name come from the spec; "
        "options that change that layout are refused (rule LCH001).",
    )


AbsPath = Annotated[
    str, StringConstraints(min_length=1, max_length=1024, pattern=r"^/[^\\]*$"), AfterValidator(plain_text)
]
K8sName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
    AfterValidator(plain_text),
]  # DNS-1123 subdomain (PVC, Secret names)


def _not_reserved(name: str) -> str:
    if reserved_pod_env(name):
        raise ValueError(
            f"{name} belongs to the process, Ray or the GPU assignment (backends/kubernetes/pod_env.yaml): a pod "
            "value from a Secret would override it in every Ray worker; take the Secret under another name"
        )
    return name


EnvName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"),
    AfterValidator(plain_text),
    AfterValidator(_not_reserved),
]
SecretKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$"),
    AfterValidator(plain_text),
]
_SWEEP_FUNCTIONS = ("choice", "range", "interval", "glob")  # Hydra's sweep functions (OverrideParser.g4)
_CLOSE = {"[": "]", "{": "}", "(": ")"}


def _one_value(text: str) -> str:
    """An override's value must be one Hydra value: brackets and quotes closed, no sweep (a top-level comma,
    choice()/range()/interval()/glob()), since launch.sh runs one job, not a multirun."""
    value = text.partition("=")[2]
    stack: list[str] = []
    quote = ""
    i = 0
    while i < len(value):
        ch = value[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in _CLOSE:
            if ch == "(" and not stack:
                word = value[:i].rstrip().rsplit(" ", 1)[-1]
                if word in _SWEEP_FUNCTIONS:
                    raise ValueError(f"{word}(...) is a Hydra sweep; launch.sh runs one job: give one value")
            stack.append(_CLOSE[ch])
        elif ch in "]})":
            if not stack or stack.pop() != ch:
                raise ValueError(f"has an unbalanced {ch!r} in its value")
        elif ch == "," and not stack:
            raise ValueError(
                "a comma outside brackets makes a Hydra sweep; quote the value or use [a,b] for a list"
            )
        i += 1
    if quote:
        raise ValueError(f"has an unclosed {quote} quote in its value")
    if stack:
        raise ValueError(f"has an unclosed bracket in its value (expected {stack[-1]!r})")
    return text


# One Hydra override appended to launch.sh's arguments in a KubeRay launch ([+|++|~]dotted.key=value).
HydraOverride = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=4096, pattern=r"^(\+{1,2}|~)?[A-Za-z_][A-Za-z0-9_.@/-]*(=.*)?$"
    ),
    AfterValidator(plain_text),
    AfterValidator(_one_value),
]


def _image(value: str) -> str:
    if any(c.isspace() for c in value):
        raise ValueError("an image reference has no blanks")
    return value


def _address(value: str) -> str:
    if any(c.isspace() for c in value):
        raise ValueError("an address has no blanks")
    netloc = urlsplit(value).netloc if "://" in value else value.partition("/")[0]
    if "@" in netloc:
        raise ValueError(
            "holds credentials (user:password@host): the address is written into submit.sh and the bundle "
            "README, which anyone who can read the bundle reads; write the address without them and give "
            "the credentials to the submitting shell instead"
        )
    return value


def _working_dir(value: str) -> str:
    # Relative folders count from the bundle folder, known only at compile (compiler/guards.py judges them
    # resolved there, and submit.sh/launch.sh again where they run); an absolute one is judged here.
    folder = posixpath.normpath(value)  # './' is '.', 'a/../b' is 'b'
    if is_root(folder):
        raise ValueError(
            "is the root folder: Ray would upload the whole file system as the job's working_dir"
        )
    return folder


ImageRef = Annotated[PathText, AfterValidator(_image)]
Address = Annotated[PathText, AfterValidator(_address)]
WorkingDir = Annotated[PathText, AfterValidator(_working_dir)]


class KubeRayVolume(Section):
    """A volume mounted at the same path in the head and every worker pod (model, data, checkpoints)."""

    name: K8sLabel = Field(description="Volume name in the pod spec (a DNS-1123 label).")
    mount_path: AbsPath = Field(
        description="Where the pods see it, e.g. /models (spec paths under it resolve)."
    )
    host_path: Optional[AbsPath] = Field(None, description="A folder on the Kubernetes node (hostPath).")
    pvc: Optional[K8sName] = Field(None, description="A PersistentVolumeClaim name in the namespace.")
    read_only: bool = Field(False, description="Mount it read-only (model and data folders). Default false.")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.host_path is None) == (self.pvc is None):
            raise ValueError("set exactly one of host_path and pvc")
        return self


class SecretEnv(Section):
    """An environment variable of the head and worker pods read from a Kubernetes Secret (HF token, logger keys)."""

    env: EnvName = Field(
        description="The environment variable's name in the pods, e.g. HF_TOKEN or WANDB_API_KEY."
    )
    secret: K8sName = Field(description="Secret name in the namespace.")
    key: SecretKey = Field(description="Key inside the Secret.")


class KubeRaySettings(Section):
    image: Optional[ImageRef] = Field(
        None,
        description="Image of the head, worker and submitter pods. Default: verl's published image for the "
        "pinned rollout engine version (backends/verl/<version>.yaml, images.kuberay); an engine version with "
        "no published image needs this field.",
    )
    volumes: list[KubeRayVolume] = Field(
        default_factory=list,
        description="Volumes (hostPath or PVC) mounted in the head and worker pods: the "
        "folders holding model.path, the data files and the checkpoint folder: every path the job reads "
        "must lie under one (CLU002), the checkpoint folder under a writable one (CLU003).",
    )
    secret_env: list[SecretEnv] = Field(
        default_factory=list,
        description="Environment variables of the head and worker pods from Kubernetes "
        "Secrets, by name (e.g. HF_TOKEN, WANDB_API_KEY); never written into the bundle. Names the process, Ray or "
        "the GPU assignment own (PATH, PYTHONPATH, LD_*, HOME, RAY_*, CUDA_VISIBLE_DEVICES; "
        "backends/kubernetes/pod_env.yaml) and names the bundle sets for every Ray worker are refused.",
    )
    extra_overrides: list[HydraOverride] = Field(
        default_factory=list,
        description="Hydra overrides appended to launch.sh's arguments (from extra_overrides.sh in the "
        "ConfigMap, after fp8spec's, so they win), e.g. trainer.default_local_dir=/checkpoints/run1.",
    )
    namespace: K8sLabel = Field("default", description="Kubernetes namespace (a DNS-1123 label).")
    ray_version: Optional[Version] = Field(
        None, description="Ray version inside the image (rayClusterSpec.rayVersion); left out when unset."
    )
    head_cpus: K8sQuantity = Field(
        "4", description="CPU request and limit of the head pod (it runs no Ray work)."
    )
    head_memory: K8sQuantity = Field("16Gi", description="Memory request and limit of the head pod.")
    worker_cpus: Optional[K8sQuantity] = Field(
        None, description="CPU request and limit of each GPU worker pod."
    )
    worker_memory: Optional[K8sQuantity] = Field(
        None, description="Memory request and limit of each GPU worker pod."
    )

    @field_validator("volumes")
    @classmethod
    def _distinct_volumes(cls, volumes: list[KubeRayVolume]) -> list[KubeRayVolume]:
        for attr, reserved in zip(("name", "mount_path"), POD_SHM_VOLUME):
            values = [
                lexical(getattr(v, attr)) if attr == "mount_path" else getattr(v, attr) for v in volumes
            ]
            if reserved in values:
                raise ValueError(
                    f"volume {attr} {reserved!r} is the worker pods' own shared-memory volume (rayjob.yaml); "
                    "Kubernetes refuses a pod with it twice: choose another"
                )
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"volume {attr} {twice[0]!r} is used twice")
        return volumes

    @field_validator("secret_env")
    @classmethod
    def _distinct_env(cls, items: list[SecretEnv]) -> list[SecretEnv]:
        names = [i.env for i in items]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"env {twice[0]!r} is set twice")
        return items


class ClusterSection(Section):
    launcher: Literal[LAUNCHERS] = Field(  # type: ignore[valid-type]  # pydantic expands the tuple (the table)
        LAUNCHERS[0],
        description="The launcher the bundle README tells you to run: "
        + either([f"{row.name} ({row.summary})" for row in launchers()])
        + f"; all {how_many(len(LAUNCHERS))} are generated. Default {LAUNCHERS[0]}.",
    )
    address: Address = Field(
        "http://127.0.0.1:8265",
        description="Ray dashboard address submit.sh passes to "
        "`ray job submit --address`. Default http://127.0.0.1:8265.",
    )
    working_dir: WorkingDir = Field(
        ".",
        description="Folder uploaded as the Ray job's working_dir (runtime_env.yaml), "
        "relative to the bundle. Default '.', the bundle itself.",
    )
    slurm: SlurmSettings = Field(default_factory=SlurmSettings, description="Job options of slurm.sbatch.")
    kuberay: KubeRaySettings = Field(
        default_factory=KubeRaySettings, description="Pods and image of the KubeRay RayJob (rayjob.yaml)."
    )
