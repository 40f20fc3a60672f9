"""The preflight every launcher runs first: preflight.py (the self-contained check, fp8spec/preflight/preflight.py)
and preflight.json, the values it expects on every node (pins, env vars, GPU, CUDA, model facts, data files)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from fp8spec import __version__
from fp8spec.hardware import gpu as gpu_facts
from fp8spec.launchers.base import submission_id
from fp8spec.patchset import shipped_fileset
from fp8spec.preflight import program_files
from fp8spec.targets import STACK_KINDS
from fp8spec.trainers import get_trainer

if TYPE_CHECKING:
    from fp8spec.compiler.settings import SettingsPlan
    from fp8spec.resolve.valid import ValidSpec
    from fp8spec.specfile.model import Spec

PREFLIGHT_FORMAT = 2
# The credential each logger of trainer.loggers needs on the cluster. wandb: "WANDB_API_KEY ... must be set if
# wandb login hasn't been run on the remote machine" (docs.wandb.ai/guides/track/environment-variables; `wandb
# login` keeps the key in ~/.netrc under api.wandb.ai), and WANDB_MODE=disabled turns the logger into a no-op.
# Other loggers' credentials are not recorded: the preflight says nothing of them.
LOGGER_CREDENTIALS = {
    "wandb": {
        "env": "WANDB_API_KEY",
        "netrc_host": "api.wandb.ai",
        "mode_env": "WANDB_MODE",
        "modes_without_key": ["disabled"],
    },
}


def credentials(spec: Spec) -> list[dict]:
    """The credentials the spec's loggers need, each with the logger it is for."""
    return [
        {"logger": name, **LOGGER_CREDENTIALS[name]}
        for name in spec.trainer.loggers
        if name in LOGGER_CREDENTIALS
    ]


def preflight_files(valid: ValidSpec, backend: str, plan: SettingsPlan) -> dict[str, str]:
    expected = preflight_expected(valid, backend, plan)
    return {
        **program_files(),
        "preflight.json": json.dumps(expected, indent=2, sort_keys=True) + "\n",
    }


def data_files(spec: Spec) -> list[str]:
    """Every data file the run reads (train, then validation), as the spec names them."""
    out: list[str] = []
    for value in (spec.data.train_files, spec.data.val_files):
        if value is not None:
            out += [value] if isinstance(value, str) else list(value)
    return list(dict.fromkeys(out))


def preflight_expected(valid: ValidSpec, backend: str, plan: SettingsPlan) -> dict:
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
    trainer = get_trainer(backend.split("+")[0])
    if spec.training.attention == "flash_attention_2":
        profile, fact = trainer.flash_attention_package
        packages.append(dict(valid.profile(profile).value(fact)))
    elif trainer.hf_model:  # sdpa, eager, flex with padding removal: transformers' packed-sequence masks
        packages.append(dict(valid.profile("verl").value("package.packed_sequence_masks")))
    if trainer.bridge:
        bridge = "package.mbridge" if spec.training.bridge == "mbridge" else "package.megatron_bridge"
        packages.append(dict(valid.profile("verl").value(bridge)))
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
        "backend": backend,
        "submission_id": submission_id(spec.name, backend, valid.sha256),
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
        "credentials": credentials(spec),
        "ray_cpus": ray_cpus(valid),
    }


def ray_cpus(valid: ValidSpec) -> dict:
    """The logical CPUs verl's main_ppo takes from the Ray cluster (backends/verl/<version>.yaml: the CPU-only
    actors placed before it asks for GPUs, then each GPU's placement-group bundle): without them it waits
    forever in silence, so preflight_cpus.py refuses such a cluster in seconds."""
    verl = valid.profile("verl")
    return {
        "verl": valid.used_stack()["verl"],
        "before_gpus": verl.value("requirement.ray_cpus_before_gpus"),
        "per_gpu": verl.value("requirement.ray_cpus_per_gpu"),
    }
