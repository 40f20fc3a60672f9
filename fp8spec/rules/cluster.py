"""Cluster: what a KubeRay launch needs that the spec must say (the image, where the files are mounted)."""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule
from fp8spec.specfile.paths import lexical

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@rule(
    "CLU001",
    "kuberay-image-unknown",
    "error",
    "A KubeRay launch has no image for the pinned rollout engine version.",
    """The head, worker and submitter pods run one image, which must hold the pinned verl and engine. verl
    publishes one image per engine release (verl's docker/README.md: verlai/verl:vllm024.latest for vLLM
    0.24.0, verlai/verl:sgl0512.latest for SGLang 0.5.12); an SGLang run on the vLLM image, or an engine
    version no image carries, fails its preflight on every node.""",
    "set cluster.kuberay.image to an image with the pinned stack, or pin the engine version verl's image has",
    needs_model=False,
    examples=Examples(
        bad={"cluster": {"launcher": "kuberay"}, "stack": {"vllm": "0.33.0"}},
        good={
            "cluster": {"launcher": "kuberay", "kuberay": {"image": "registry.example/verl:v033"}},
            "stack": {"vllm": "0.33.0"},
        },
        message="no verl image is known for vllm 0.33.0",
    ),
)
def kuberay_image_unknown(ctx: ResolvedSpec) -> Iterator[Finding]:
    if ctx.spec.cluster.launcher != "kuberay" or ctx.profile("verl") is None:
        return
    if ctx.kuberay_image() is None:
        yield Finding(
            f"no verl image is known for {ctx.engine.name} {ctx.engine_version} (verl "
            f"{ctx.spec.stack.verl} publishes images for "
            f"{', '.join(sorted(ctx.fact('verl', 'images.kuberay') or {})) or 'no engine'})",
            "cluster.kuberay.image",
        )


def _under(path: str, mounts: list[str]) -> bool:
    path = lexical(path)
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


@rule(
    "CLU002",
    "kuberay-path-not-mounted",
    "warning",
    "A KubeRay launch reads the model or a data file from a path no volume mounts.",
    """Pods see only their image and the volumes mounted into them. model.path (unless it is a hub id) and every
    data file must lie under a cluster.kuberay.volumes mount_path, or be baked into the image; otherwise the
    preflight fails on every node and verl cannot load them.""",
    "add a volume (hostPath or PVC) whose mount_path holds the path, or acknowledge it when the image holds it",
    acknowledgeable=True,
    needs_model=False,
    examples=Examples(
        bad={
            "cluster": {
                "launcher": "kuberay",
                "kuberay": {"volumes": [{"name": "models", "mount_path": "/models", "pvc": "models"}]},
            }
        },
        good={
            "cluster": {
                "launcher": "kuberay",
                "kuberay": {
                    "volumes": [
                        {"name": "models", "mount_path": "/models", "pvc": "models"},
                        {"name": "data", "mount_path": "/data/", "host_path": "/mnt/data"},
                    ]
                },
            }
        },
        message="data.train_files /data/train.parquet is under no cluster.kuberay.volumes mount_path",
    ),
)
def kuberay_path_not_mounted(ctx: ResolvedSpec) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.cluster.launcher != "kuberay":
        return
    mounts = [lexical(v.mount_path) for v in spec.cluster.kuberay.volumes]
    if not spec.model.from_hub and not _under(spec.model.path, mounts):
        yield Finding(
            f"model.path {spec.model.path} is under no cluster.kuberay.volumes mount_path", "model.path"
        )
    for field in ("train_files", "val_files"):
        value = getattr(spec.data, field)
        for path in [value] if isinstance(value, str) else (value or []):
            if not _URL.match(path) and posixpath.isabs(path) and not _under(path, mounts):
                yield Finding(
                    f"data.{field} {path} is under no cluster.kuberay.volumes mount_path", f"data.{field}"
                )
