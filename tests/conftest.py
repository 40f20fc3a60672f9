"""Shared test helpers: a clean base spec, deep patching, and validating a spec dict through a real file."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"
EXAMPLE_SPECS = sorted(SPECS.glob("*.yaml"))

BASE_SPEC = {
    "version": 1,
    "name": "base",
    "model": {"name": "Qwen/Qwen3-8B-Base", "path": "/models/Qwen3-8B-Base"},
    "hardware": {"gpu": "h100", "nodes": 1, "gpus_per_node": 8, "cuda": "12.9"},
    "linear": {"quantize": True, "scale_dtype": "fp32"},
    "kv_cache": {"dtype": "bf16"},
    "correction": {"method": "tis", "clip": 2.0},
    "training": {"backend": "fsdp"},
    "rollout": {"engine": "vllm", "tp": 2},
    "algorithm": {"name": "grpo", "train_batch_size": 32, "ppo_mini_batch_size": 32},
    "data": {"train_files": "/data/train.parquet", "val_files": "/data/val.parquet"},
    "trainer": {"checkpoint_dir": "/shared/checkpoints/base"},
}

MEGATRON_FP8 = {"training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 2}}}
MOE = {"model": {"name": "Qwen/Qwen3-30B-A3B-Base", "path": "/models/Qwen3-30B-A3B-Base"}}
# The DeepSeek-V3 end-to-end FP8 run on 4 x 8 H200 that must be refused (its training state alone does not fit).
DEEPSEEK_E2E = {"model": {"name": "deepseek-ai/DeepSeek-V3", "path": "/models/DeepSeek-V3"},
                "hardware": {"gpu": "h200", "nodes": 4, "gpus_per_node": 8},
                "training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 8, "pp": 4, "ep": 8}},
                "rollout": {"tp": 8}}


def patched(base: dict, *patches: dict) -> dict:
    out = copy.deepcopy(base)
    for patch in patches:
        _merge(out, patch)
    return out


def _merge(into: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def dump_yaml(data: dict) -> str:
    buf = io.StringIO()
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.dump(data, buf)
    return buf.getvalue()


@pytest.fixture
def write_spec(tmp_path):
    def write(data: dict, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(dump_yaml(data), encoding="utf-8")
        return path

    return write


@pytest.fixture
def validate(write_spec):
    from fp8spec.rules.engine import validate_path

    def run(data: dict):
        return validate_path(write_spec(data))

    return run
