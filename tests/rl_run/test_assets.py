"""The H200 RL run's assets (benchmarks/rl_run/make_assets.py) pass verl 0.9.1's own code on CPU.

The second H200 attempt (BENCHMARKS.md section 5) reached verl's agent loop and stopped there: verl picks its
token builder from model_type qwen3 and that builder needs `<|im_end|>`. These tests run the same verl code
paths the run takes before and after generation (prompt rendering through the agent loop's token builder,
the dataset, the GSM8K reward), so an asset that verl refuses fails here, not on the GPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("verl")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rl-assets")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/rl_run/make_assets.py"), "--out", str(out),
                           "--train", "32", "--test", "8"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_agent_loop_token_builder_renders_the_prompts(assets):
    import pandas as pd
    from transformers import AutoConfig, AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    model_type = AutoConfig.from_pretrained(assets / "model").model_type
    builder = create_continuous_token_builder(tokenizer, hf_model_type=model_type)
    assert type(builder).__name__ == "QwenContinuousTokenBuilder"
    prompt = pd.read_parquet(assets / "data/train.parquet")["prompt"][0]
    ids = builder.build_initial_tokens(list(prompt))
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n"), text


def test_generation_stops_at_im_end(assets):
    import json

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    config = json.loads((assets / "model/config.json").read_text(encoding="utf-8"))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert config["eos_token_id"] == im_end == tokenizer.eos_token_id
    assert len(tokenizer.encode("\n", add_special_tokens=False)) == 1
    assert config["vocab_size"] >= len(tokenizer)


def test_dataset_and_reward_are_verls(assets):
    import pandas as pd
    from verl.utils.reward_score import default_compute_score

    row = pd.read_parquet(assets / "data/test.parquet").iloc[0]
    answer = row["reward_model"]["ground_truth"]
    assert default_compute_score(row["data_source"], f"so #### {answer}", answer) == 1.0
    assert default_compute_score(row["data_source"], "#### -1", answer) == 0.0
