"""`fp8spec init`: a commented starter spec from a template, for the model and hardware asked for.

The template is rendered with a first guess for the layout, then validated exactly as `fp8spec validate`
would; while a finding carries proposals (values that pass every rule, fp8spec.rules.proposals), the first
one is applied to the YAML text (comments kept) and the spec validated again. What comes out either
validates clean as written, or is not written at all.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fp8spec.compiler.templates import template_environment

TEMPLATES = {
    "dense-vllm": "FSDP + vLLM: FP8 linears, FP8 KV cache recalibrated per step, TIS (the paper's dense run)",
    "moe-megatron": "Megatron + vLLM, MoE, end-to-end FP8 training (the paper's MoE run)",
    "sglang": "FSDP + SGLang: FP8 linears, BF16 KV cache, TIS",
}
DEFAULTS = {  # template -> (model, gpu, nodes)
    "dense-vllm": ("Qwen/Qwen3-8B-Base", "h100", 1),
    "moe-megatron": ("Qwen/Qwen3-30B-A3B-Base", "h100", 2),
    "sglang": ("Qwen/Qwen3-8B", "h200", 1),
}
SUFFIX = {"dense-vllm": "fp8-rollout", "moe-megatron": "fp8-e2e", "sglang": "sglang-fp8-rollout"}
MAX_REPAIRS = 12


class StarterError(ValueError):
    """A request init cannot serve (unknown template or model): bad usage, exit 2."""


@dataclass
class Starter:
    text: str
    validation: Any  # fp8spec.rules.runner.Validation of ``text``
    changes: list[str] = field(default_factory=list)  # "rollout.tp 1 -> 2 (BLK001)", in order

    @property
    def clean(self) -> bool:
        return not any(d.severity in ("error", "warning") for d in self.validation.diagnostics)


def default_name(template: str, model_id: str) -> str:
    base = re.sub(r"[^a-z0-9._-]+", "-", model_id.rsplit("/", 1)[-1].lower()).strip("-._") or "model"
    return f"{base}-{SUFFIX[template]}"[:63]


def starter_spec(
    template: str,
    model_id: Optional[str] = None,
    gpu: Optional[str] = None,
    nodes: Optional[int] = None,
    gpus_per_node: int = 8,
    name: Optional[str] = None,
    file: str = "spec.yaml",
    spec_dir: Path = Path("."),
) -> Starter:
    from fp8spec.catalog import CatalogError, catalog_ids, get_model

    if template not in TEMPLATES:
        raise StarterError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    d_model, d_gpu, d_nodes = DEFAULTS[template]
    model_id = model_id or d_model
    try:
        model = get_model(model_id)
    except CatalogError:
        raise StarterError(
            f"--model {model_id!r} is not in the catalog ({', '.join(catalog_ids())}); for "
            "another model write model.config_path into the spec"
        ) from None
    gpu = gpu or d_gpu
    nodes = nodes or d_nodes
    from fp8spec.hardware import GPU_NAMES

    if gpu not in GPU_NAMES:
        raise StarterError(f"--gpu {gpu!r} is not one of {', '.join(GPU_NAMES)}")
    if name is not None and not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", name):
        raise StarterError(
            f"--name {name!r}: use lowercase letters, digits, '.', '_' and '-' (it names the bundle)"
        )
    values = _first_guess(template, model, gpu, nodes, gpus_per_node)
    values.update(
        name=name or default_name(template, model_id),
        model_id=model_id,
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        model_path=f"/models/{model_id.rsplit('/', 1)[-1]}",
        file=file,
    )
    text = template_environment().get_template(f"init/{template}.yaml.j2").render(**values)
    return _repair(text, file, spec_dir)


def _first_guess(template: str, model, gpu: str, nodes: int, gpus_per_node: int) -> dict:
    from fp8spec.hardware import gpu as gpu_facts

    world = nodes * gpus_per_node
    values: dict[str, Any] = {
        "scale_dtype": "ue8m0" if gpu_facts(gpu).is_blackwell else "fp32",
        "rollout_tp": min(2, gpus_per_node),
    }
    if template == "moe-megatron":
        tp = min(4, gpus_per_node)
        ep = min(8, world, model.num_experts or 1) if model.is_moe else 1
        values.update(train_tp=tp, train_pp=1, train_ep=ep, train_etp=1 if model.is_moe and ep > 1 else None)
    return values


def _repair(text: str, file: str, spec_dir: Path) -> Starter:
    """Validate; apply the first proposal of the first finding that has one; repeat."""
    from fp8spec.rules.runner import validate_loaded
    from fp8spec.specfile.loader import load_spec_text

    changes: list[str] = []
    for _ in range(MAX_REPAIRS):
        validation = validate_loaded(load_spec_text(text, file), spec_dir)
        if validation.loaded.spec is None:
            break
        pending = [(rule, f) for rule, f, severity in validation.findings if severity in ("error", "warning")]
        pending.sort(key=lambda rf: (rf[0].severity != "error", rf[0].code))
        fix = next(((rule, f.proposals[0]) for rule, f in pending if f.proposals), None)
        if fix is None:
            return _acknowledge_rest(text, file, spec_dir, validation, changes)
        rule, proposal = fix
        spec_data = validation.loaded.spec
        for dotted, value in proposal.items():
            old = _get(spec_data, dotted)
            changes.append(f"{dotted} {_shown(old)} -> {_shown(value)} ({rule.code})")
        text = set_values(text, proposal)
    validation = validate_loaded(load_spec_text(text, file), spec_dir)
    return Starter(text, validation, changes)


def _acknowledge_rest(text: str, file: str, spec_dir: Path, validation, changes: list[str]) -> Starter:
    """Warnings no single change removes, when every one is acknowledgeable (the paper's 20K-token responses
    preempt on most GPUs: MEM004), are acknowledged with a reason that says so; anything else stays."""
    from fp8spec.rules.runner import validate_loaded
    from fp8spec.specfile.loader import load_spec_text

    left = [(rule, f) for rule, f, severity in validation.findings if severity in ("error", "warning")]
    if not left or any(rule.severity == "error" or not rule.acknowledgeable for rule, _ in left):
        return Starter(text, validation, changes)
    acks = {
        f"acknowledge.{rule.code}": f"fp8spec init found no change that removes it on this hardware: "
        f"{rule.summary[0].lower()}{rule.summary[1:].rstrip('.')}"
        for rule, _ in left
    }
    text = set_values(text, acks)
    changes.extend(
        f"{key} (kept as a warning you accept; `fp8spec rules {key.split('.')[1]}`)" for key in acks
    )
    return Starter(text, validate_loaded(load_spec_text(text, file), spec_dir), changes)


def set_values(text: str, changes: dict[str, Any]) -> str:
    """The YAML ``text`` with each dotted field set (created where missing), comments and layout kept."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML()  # round trip
    yaml.width = 4096
    yaml.preserve_quotes = True
    data = yaml.load(text)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            if part not in node or node[part] is None:
                node[part] = CommentedMap()
            node = node[part]
        node[last] = value
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _get(spec, dotted: str) -> Any:
    node = spec
    for part in dotted.split("."):
        node = getattr(node, part, None)
    return node


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)
