"""The H200 RL run's assets (benchmarks/rl_run/make_assets.py) pass verl 0.9.1's own code on CPU.

The second H200 attempt (docs/results.md#rl-runs) reached verl's agent loop and stopped there: verl picks its
token builder from model_type qwen3 and that builder needs `<|im_end|>`. These tests run the same verl code
paths the run takes before and after generation (prompt rendering through the agent loop's token builder,
the dataset, the GSM8K reward), so an asset that verl refuses fails here, not on the GPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, require

pytestmark = pytest.mark.slow

require("verl")
require("transformers")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rl-assets")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.rl_run.make_assets", "--out", str(out),
                           "--train", "32", "--test", "8"], capture_output=True, text=True, timeout=600, cwd=REPO)
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
    # verl's vLLM server masks every logit at or past len(tokenizer), the trainer does not: equal sizes
    # keep the rollout and the trainer on one distribution (make_assets.py docstring)
    assert config["vocab_size"] == len(tokenizer)


def test_dataset_and_reward_are_verls(assets):
    import pandas as pd
    from verl.utils.reward_score import default_compute_score

    row = pd.read_parquet(assets / "data/test.parquet").iloc[0]
    answer = row["reward_model"]["ground_truth"]
    assert default_compute_score(row["data_source"], f"so #### {answer}", answer) == 1.0
    assert default_compute_score(row["data_source"], "#### -1", answer) == 0.0


def test_custom_reward_separates_the_random_models_responses(assets):
    """The spec's reward, loaded by verl's own loader, gives a group of the random model's sampled responses
    different scores, so GRPO's advantages (and the actor's gradient) are not all zero; verl's GSM8K rule
    alone scores them all 0 (the fourth H200 attempt)."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.import_utils import load_extern_object
    from verl.utils.reward_score import default_compute_score

    score = load_extern_object(module_path=str(REPO / "specs/rewards/tiny_arith.py"), object_name="compute_score")
    row = pd.read_parquet(assets / "data/train.parquet").iloc[0]
    answer = row["reward_model"]["ground_truth"]
    assert score(data_source=row["data_source"], solution_str=f"so #### {answer}", ground_truth=answer) == 1.0
    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    model = AutoModelForCausalLM.from_pretrained(assets / "model", dtype=torch.float32)
    prompt = tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    torch.manual_seed(0)
    out = model.generate(**prompt, do_sample=True, max_new_tokens=48, num_return_sequences=8,
                         pad_token_id=tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(out[:, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    rewards = [score(data_source=row["data_source"], solution_str=t, ground_truth=answer) for t in texts]
    assert all(0.0 <= r <= 1.0 for r in rewards) and len(set(rewards)) > 1, rewards
    assert {default_compute_score(row["data_source"], t, answer) for t in texts} == {0.0}
