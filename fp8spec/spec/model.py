"""The FP8-RL spec as a typed model.

Field names are a public contract (specs in the wild use them): add fields, never rename them.
Defaults reproduce the FP8-RL paper's recipe: blockwise 128x128 E4M3 with FP32 scales, router,
lm_head, embeddings and norms kept in BF16, token-level TIS with C=2.
Semantic checks (divisibility, hardware, backend versions) live in fp8spec.rules, not here:
the model only says what a well-formed spec looks like.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal, Optional, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator,
                      model_validator)

from fp8spec.hardware import GPU_NAMES

SYMBOLIC_EXCLUSIONS = ("lm_head", "embeddings", "norms", "router")

# Bounds keep absurd numbers (1e400, 2**80 GPUs) out of the arithmetic the rules do.
PositiveCount = Annotated[int, Field(ge=1, le=1_000_000)]
SmallCount = Annotated[int, Field(ge=1, le=4096)]
NonNegLayers = Annotated[int, Field(ge=0, le=10_000)]
Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$", max_length=40)]
CudaVersion = Annotated[str, StringConstraints(pattern=r"^[0-9]{2}\.[0-9]{1,2}$")]


def _plain_text(value: str) -> str:
    # Values flow into Hydra overrides, shell and YAML: no control characters, no OmegaConf interpolation.
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("control characters (newlines, tabs, ...) are not allowed")
    if "${" in value:
        raise ValueError("'${' is not allowed: OmegaConf would interpolate it on the cluster")
    return value


NonEmpty = Annotated[str, StringConstraints(min_length=1, max_length=4096), AfterValidator(_plain_text)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, ge=-1e9, le=1e9)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class ModelSection(_Section):
    name: NonEmpty = Field(description="Model id from fp8spec's catalog, e.g. Qwen/Qwen3-30B-A3B-Base.")
    config_path: Optional[NonEmpty] = Field(
        None, description="Local Hugging Face config.json that replaces the catalog entry (read offline)."
    )
    path: NonEmpty = Field(description="Where the weights live on the cluster: a Hugging Face model folder on "
                           "every node (the preflight fails when it is missing), or a hub id with from_hub.")
    from_hub: bool = Field(False, description="model.path is a Hugging Face hub id that verl downloads, not a "
                           "folder: the preflight does not look for it on the nodes.")


class HardwareSection(_Section):
    gpu: Literal[GPU_NAMES] = Field(description="The TARGET GPU; scale formats follow it, never the local machine.")
    nodes: SmallCount = 1
    gpus_per_node: Annotated[int, Field(ge=1, le=64)] = 8
    cuda: CudaVersion = Field("12.9", description="CUDA version of the cluster's torch build (torch.version.cuda).")


class LinearSection(_Section):
    quantize: bool = Field(True, description="W8A8 FP8 for the rollout engine's linear layers.")
    format: Literal["e4m3"] = "e4m3"
    block_size: tuple[Annotated[int, Field(ge=1, le=4096)], Annotated[int, Field(ge=1, le=4096)]] = (128, 128)
    scale_dtype: Literal["fp32", "ue8m0"] = Field(
        "fp32", description="Block scale format: fp32 = amax/448; ue8m0 = 2^ceil(log2(amax/448))."
    )
    exclude: list[NonEmpty] = Field(
        default_factory=lambda: list(SYMBOLIC_EXCLUSIONS),
        description="Kept in BF16: symbolic groups lm_head, embeddings, norms, router, or anchored patterns "
        "over checkpoint module names ('*' spans dots; 're:' prefix for a regex).",
    )
    bf16_first_layers: NonNegLayers = 0
    bf16_last_layers: NonNegLayers = 0


class KVCacheSection(_Section):
    dtype: Literal["bf16", "fp8_e4m3", "fp8_e5m2"] = "bf16"
    recalibrate: Literal["per_step", "once", "none"] = Field(
        "per_step", description="When q/k/v scales are recomputed (only meaningful for FP8 dtypes)."
    )


class CorrectionSection(_Section):
    method: Literal["none", "tis", "seq_tis", "mask", "seq_mask"] = Field(
        "tis",
        description="tis = token-level truncated IS (paper, C=2); seq_tis = sequence-level truncated IS; "
        "mask / seq_mask = masked IS (IcePop) with [low, high] bounds.",
    )
    clip: FiniteFloat = Field(2.0, description="Truncation threshold C for tis / seq_tis.")
    bounds: Optional[tuple[FiniteFloat, FiniteFloat]] = Field(None, description="[low, high] for mask variants.")
    rejection: Optional[NonEmpty] = Field(
        None, description="verl rollout_rs option(s), comma-separated (e.g. seq_mean_k1); off by default."
    )
    rejection_threshold: Optional[NonEmpty] = None


class ParallelSection(_Section):
    tp: SmallCount = 1
    pp: SmallCount = 1
    ep: SmallCount = 1
    cp: SmallCount = 1


class TrainingSection(_Section):
    backend: Literal["fsdp", "megatron"] = "fsdp"
    precision: Literal["bf16", "fp8"] = "bf16"
    fp8_recipe: Literal["hybrid", "e4m3"] = "hybrid"
    fp8_scaling: Literal["blockwise", "tensorwise", "delayed", "mxfp8"] = "blockwise"
    router_dtype: Literal["bf16", "fp32"] = "bf16"
    parallel: ParallelSection = Field(default_factory=ParallelSection)


class RolloutSection(_Section):
    engine: Literal["vllm", "sglang"] = "vllm"
    tp: SmallCount = 1
    pp: SmallCount = 1
    ep: SmallCount = 1
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.6
    n: SmallCount = 16
    max_prompt_length: PositiveCount = 2048
    max_response_length: PositiveCount = 20480
    calculate_log_probs: bool = Field(True, description="Return rollout log-probs; every correction needs them.")


class AlgorithmSection(_Section):
    name: Literal["grpo", "dapo"] = "grpo"
    train_batch_size: PositiveCount = 128
    ppo_mini_batch_size: PositiveCount = 32
    ppo_micro_batch_size_per_gpu: SmallCount = 1
    use_dynamic_bsz: bool = False
    lr: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = 1e-6
    total_epochs: SmallCount = 1


class DataSection(_Section):
    train_files: Union[NonEmpty, list[NonEmpty]] = Field(description="Parquet file(s) on the cluster.")
    val_files: Union[NonEmpty, list[NonEmpty], None] = None


# NonEmpty (no control characters, no '${') with a pattern; the pattern stays visible in the JSON Schema.
def _patterned(pattern: str, max_length: int):
    return Annotated[str, StringConstraints(min_length=1, max_length=max_length, pattern=pattern),
                     AfterValidator(_plain_text)]


# Written into #SBATCH lines (sbatch parses them itself): no blanks, quotes, '$' or backslashes.
SlurmName = _patterned(r"^[A-Za-z0-9_.,:+-]+$", 200)
SbatchOption = _patterned(r"^--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=+/@%&|!*\[\]-]+)?$", 200)
# Options the launcher writes from the spec: a second one would contradict hardware.* or the fields above.
SBATCH_FROM_SPEC = ("--nodes", "--ntasks-per-node", "--gpus-per-node", "--gpus", "--gres", "--exclusive",
                    "--partition", "--account", "--time", "--job-name")
K8sLabel = _patterned(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", 63)
K8sQuantity = _patterned(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$", 32)


class SlurmSettings(_Section):
    partition: Optional[SlurmName] = None
    account: Optional[SlurmName] = None
    time_limit: Annotated[str, StringConstraints(pattern=r"^[0-9:-]{1,16}$")] = "24:00:00"
    extra_sbatch: list[SbatchOption] = Field(
        default_factory=list,
        description="More #SBATCH options, one '--name=value' each (e.g. --qos=high, --mem=0). Nodes, GPUs, "
        "--exclusive, partition, account, time and job name come from the spec and cannot be repeated here.",
    )

    @field_validator("extra_sbatch")
    @classmethod
    def _not_from_spec(cls, options: list[str]) -> list[str]:
        for option in options:
            name = option.split("=", 1)[0]
            if name in SBATCH_FROM_SPEC:
                raise ValueError(f"{name} is written from the spec (hardware.*, cluster.slurm.*); "
                                 "remove it here")
        return options


AbsPath = _patterned(r"^/[^\\]*$", 1024)
K8sName = _patterned(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", 253)  # DNS-1123 subdomain (PVC, Secret names)
EnvName = _patterned(r"^[A-Za-z_][A-Za-z0-9_]*$", 128)
SecretKey = _patterned(r"^[-._a-zA-Z0-9]+$", 253)
# One Hydra override appended to launch.sh in the RayJob entrypoint ([+|++|~]dotted.key=value).
HydraOverride = _patterned(r"^(\+{1,2}|~)?[A-Za-z_][A-Za-z0-9_.@/-]*(=.*)?$", 4096)


class KubeRayVolume(_Section):
    """A volume mounted at the same path in the head and every worker pod (model, data, checkpoints)."""

    name: K8sLabel = Field(description="Volume name in the pod spec (a DNS-1123 label).")
    mount_path: AbsPath = Field(description="Where the pods see it, e.g. /models (spec paths under it resolve).")
    host_path: Optional[AbsPath] = Field(None, description="A folder on the Kubernetes node (hostPath).")
    pvc: Optional[K8sName] = Field(None, description="A PersistentVolumeClaim name in the namespace.")
    read_only: bool = False

    @model_validator(mode="after")
    def _one_source(self):
        if (self.host_path is None) == (self.pvc is None):
            raise ValueError("set exactly one of host_path and pvc")
        return self


class SecretEnv(_Section):
    """An environment variable of the head and worker pods read from a Kubernetes Secret (HF token, logger keys)."""

    env: EnvName
    secret: K8sName = Field(description="Secret name in the namespace.")
    key: SecretKey = Field(description="Key inside the Secret.")


class KubeRaySettings(_Section):
    image: Optional[NonEmpty] = Field(
        None, description="Image of the head, worker and submitter pods. Default: verl's published image for the "
        "pinned rollout engine version (backends/verl/<version>.yaml, images.kuberay); an engine version with "
        "no published image needs this field.")
    volumes: list[KubeRayVolume] = Field(
        default_factory=list, description="Volumes (hostPath or PVC) mounted in the head and worker pods: the "
        "folders holding model.path, the data files and the checkpoint folder.")
    secret_env: list[SecretEnv] = Field(
        default_factory=list, description="Environment variables of the head and worker pods from Kubernetes "
        "Secrets, by name (e.g. HF_TOKEN, WANDB_API_KEY); never written into the bundle.")
    extra_overrides: list[HydraOverride] = Field(
        default_factory=list, description="Hydra overrides appended to launch.sh in the RayJob entrypoint "
        "(after fp8spec's, so they win), e.g. trainer.default_local_dir=/checkpoints/run1.")
    namespace: K8sLabel = Field("default", description="Kubernetes namespace (a DNS-1123 label).")
    ray_version: Optional[Version] = Field(
        None, description="Ray version inside the image (rayClusterSpec.rayVersion); left out when unset."
    )
    head_cpus: K8sQuantity = Field("4",
                                   description="CPU request and limit of the head pod (it runs no Ray work).")
    head_memory: K8sQuantity = Field("16Gi", description="Memory request and limit of the head pod.")
    worker_cpus: Optional[K8sQuantity] = Field(None,
                                               description="CPU request and limit of each GPU worker pod.")
    worker_memory: Optional[K8sQuantity] = Field(None,
                                                 description="Memory request and limit of each GPU worker pod.")

    @field_validator("volumes")
    @classmethod
    def _distinct_volumes(cls, volumes: list[KubeRayVolume]) -> list[KubeRayVolume]:
        for attr in ("name", "mount_path"):
            values = [getattr(v, attr) for v in volumes]
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


class ClusterSection(_Section):
    launcher: Literal["ray", "slurm", "kuberay"] = "ray"
    address: NonEmpty = Field("http://127.0.0.1:8265", description="Ray dashboard address for `ray job submit`.")
    working_dir: NonEmpty = Field(".", description="Folder uploaded as the Ray job's working_dir.")
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    kuberay: KubeRaySettings = Field(default_factory=KubeRaySettings)


@lru_cache(maxsize=1)
def default_stack() -> dict[str, str]:
    """The tested stack, kept as data in backends/stack.yaml."""
    from ruamel.yaml import YAML

    from fp8spec.resources import data_dir

    with open(data_dir("backends") / "stack.yaml", encoding="utf-8") as fh:
        return {str(k): str(v) for k, v in YAML(typ="safe").load(fh).items()}


class StackSection(_Section):
    verl: Version = Field(default_factory=lambda: default_stack()["verl"])
    vllm: Version = Field(default_factory=lambda: default_stack()["vllm"])
    sglang: Version = Field(default_factory=lambda: default_stack()["sglang"])
    megatron_core: Version = Field(default_factory=lambda: default_stack()["megatron_core"])
    transformer_engine: Version = Field(default_factory=lambda: default_stack()["transformer_engine"])


RuleCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2,4}[0-9]{3}$")]


class Spec(_Section):
    """One FP8-RL run: model, hardware, FP8 choices, correction, trainer, rollout and cluster."""

    version: Literal[1] = Field(description="Spec format version.")
    name: Slug = Field(description="Names the output bundle: lowercase letters, digits, '.', '_', '-'.")
    model: ModelSection
    hardware: HardwareSection
    linear: LinearSection = Field(default_factory=LinearSection)
    kv_cache: KVCacheSection = Field(default_factory=KVCacheSection)
    correction: CorrectionSection = Field(default_factory=CorrectionSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection)
    data: DataSection
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    stack: StackSection = Field(default_factory=StackSection)
    acknowledge: dict[RuleCode, NonEmpty] = Field(
        default_factory=dict,
        description="Rule codes knowingly accepted, each with a reason (only rules marked acknowledgeable).",
    )

    @property
    def world_size(self) -> int:
        return self.hardware.nodes * self.hardware.gpus_per_node

    @property
    def fp8_rollout(self) -> bool:
        return self.linear.quantize or self.kv_cache.dtype != "bf16"
