"""Shared fixtures of the real-size RL preparation tests: every compiled bundle, the small-shape assets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO, require

SPECS = sorted((REPO / "benchmarks/rl_real/specs").glob("*.yaml"))
SMALL = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 64, "hidden_act": "silu",
         "hidden_size": 128, "intermediate_size": 256, "max_position_embeddings": 4096, "model_type": "qwen3",
         "num_attention_heads": 2, "num_hidden_layers": 1, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
         "rope_theta": 1000000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 151936}


@pytest.fixture(scope="session")
def bundles(tmp_path_factory) -> Path:
    """Every spec compiled by the CLI's entry point (in this process) into one folder (what the device run carries
    as .rl/bundles)."""
    out = tmp_path_factory.mktemp("real-bundles")
    for spec in SPECS:
        proc = run_cli_here("compile", str(spec), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def small_assets(tmp_path_factory) -> Path:
    """make_real_assets.py on CPU at a small shape with the real 151,936-entry vocabulary."""
    require("verl")
    out = tmp_path_factory.mktemp("real-assets")
    cfg = out / "config.json"
    cfg.write_text(json.dumps(SMALL), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.rl_real.make_real_assets", "--out", str(out),
                           "--config", str(cfg), "--model-dir", "model", "--device", "cpu", "--train", "64",
                           "--test", "8"], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out
