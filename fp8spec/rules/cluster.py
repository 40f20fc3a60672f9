"""Cluster: what a KubeRay launch needs that the spec must say (the image, where the files are mounted)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.resolve.job_paths import JobPath, job_paths, under
from fp8spec.rules.examples import Examples
from fp8spec.rules.registry import Finding, rule
from fp8spec.specfile.paths import lexical

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


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


def _mounts(ctx: ResolvedSpec, *, writable: bool = False) -> list[str]:
    return [lexical(v.mount_path) for v in ctx.spec.cluster.kuberay.volumes if not (writable and v.read_only)]


def _kuberay_job_paths(ctx: ResolvedSpec, *, writes: bool) -> list[JobPath]:
    """The paths a KubeRay job writes (or only reads), in field order; none for another launcher."""
    if ctx.spec.cluster.launcher != "kuberay":
        return []
    return [p for p in job_paths(ctx.spec) if p.writes == writes]


def _kuberay_volumes(*volumes: dict) -> dict:
    """A rule example's spec fragment: a KubeRay launch with these volumes."""
    return {"cluster": {"launcher": "kuberay", "kuberay": {"volumes": list(volumes)}}}


_MODELS_PVC = {"name": "models", "mount_path": "/models", "pvc": "models"}
_DATA_PVC = {"name": "data", "mount_path": "/data", "pvc": "data"}


@rule(
    "CLU002",
    "kuberay-path-not-mounted",
    "error",
    "A KubeRay launch reads a file (model, data, a checkpoint to resume from) from a path no volume mounts.",
    """Pods see only their image and the volumes mounted into them. Every path the job reads on its nodes
    (model.path unless it is a hub id, every data file, trainer.resume_from: each path-typed spec field the job
    opens, fp8spec/resolve/job_paths.py) must lie under a cluster.kuberay.volumes mount_path, or be baked into
    the image; otherwise the preflight fails on every node and verl cannot load them.""",
    "add a volume (hostPath or PVC) whose mount_path holds the path, or move the path under a mounted one; "
    "acknowledge it only when the image holds the file",
    acknowledgeable=True,
    needs_model=False,
    examples=Examples(
        bad=_kuberay_volumes(_MODELS_PVC),
        good=_kuberay_volumes(
            _MODELS_PVC, {"name": "data", "mount_path": "/data/", "host_path": "/mnt/data"}
        ),
        message="data.train_files /data/train.parquet is under no cluster.kuberay.volumes mount_path",
    ),
)
def kuberay_path_not_mounted(ctx: ResolvedSpec) -> Iterator[Finding]:
    mounts = _mounts(ctx)
    for p in _kuberay_job_paths(ctx, writes=False):
        if not under(p.path, mounts):
            yield Finding(f"{p.field} {p.path} is under no cluster.kuberay.volumes mount_path", p.field)


@rule(
    "CLU003",
    "kuberay-output-not-persisted",
    "error",
    "A KubeRay launch writes checkpoints to a path no writable volume mounts: they are deleted with the pods.",
    """The RayJob is deleted with its pods when the job ends (shutdownAfterJobFinishes: true and
    ttlSecondsAfterFinished in rayjob.yaml), and a pod's own file system goes with it. Every path the job writes
    (trainer.checkpoint_dir: each path-typed spec field the job writes, fp8spec/resolve/job_paths.py) must lie
    under a cluster.kuberay.volumes mount_path that is not read_only; otherwise verl writes the checkpoints
    into the pod, or fails to write them, and a run that stops early has nothing to resume from. No image can
    hold what the job writes, so this cannot be acknowledged.""",
    "add a writable volume (a PVC every worker pod mounts) whose mount_path holds the folder, or move the "
    "folder under a mounted writable one",
    needs_model=False,
    examples=Examples(
        bad=_kuberay_volumes(_MODELS_PVC, _DATA_PVC),
        good=_kuberay_volumes(
            _MODELS_PVC, _DATA_PVC, {"name": "shared", "mount_path": "/shared", "pvc": "shared"}
        ),
        message="trainer.checkpoint_dir /shared/checkpoints/base is under no writable cluster.kuberay.volumes",
    ),
)
def kuberay_output_not_persisted(ctx: ResolvedSpec) -> Iterator[Finding]:
    writable, mounts = _mounts(ctx, writable=True), _mounts(ctx)
    for p in _kuberay_job_paths(ctx, writes=True):
        if under(p.path, writable):
            continue
        where = "a read_only one" if under(p.path, mounts) else "the pod's own disk, deleted with the pod"
        yield Finding(
            f"{p.field} {p.path} is under no writable cluster.kuberay.volumes mount_path: the job would write "
            f"it to {where}",
            p.field,
        )
