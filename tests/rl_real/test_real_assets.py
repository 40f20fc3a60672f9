"""benchmarks/rl_real/make_real_assets.py on CPU at a small Qwen3 shape with the real vocabulary (151,936): the
tokenizer is padded to exactly vocab_size, verl 0.9.1's own agent-loop token builder renders the prompts, the
prompt lengths follow the documented spread, and the spec's reward separates a group of reserved-token
responses. The real 4B/8B shapes are initialised on the H200 only (run_h200_real.sh assets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, require

require("verl")
require("transformers")

SCRIPT = REPO / "benchmarks/rl_real/make_real_assets.py"


@pytest.fixture(scope="module")
def assets(small_assets) -> Path:
    return small_assets


def test_tokenizer_is_the_models_vocabulary_and_verls_builder_renders_it(assets):
    import pandas as pd
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    config = json.loads((assets / "model/config.json").read_text(encoding="utf-8"))
    assert len(tokenizer) == config["vocab_size"] == 151936
    assert config["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen3")
    assert type(builder).__name__ == "QwenContinuousTokenBuilder"
    rows = pd.read_parquet(assets / "data/train.parquet")
    lengths = json.loads((assets / "data/prompt_lengths.json").read_text(encoding="utf-8"))["train"]
    for i in (0, 1, 2):
        ids = builder.build_initial_tokens(list(rows["prompt"][i]))
        text = tokenizer.decode(ids)
        assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
        assert len(ids) == lengths[i]  # the recorded length is what verl's builder sends to the engine
    # reserved entries decode to text (with digits) and are never produced by encoding ordinary text
    assert tokenizer.decode([151935]) == f"<reserved_{151935 - tokenizer.convert_tokens_to_ids('<reserved_0>')}>"
    assert max(tokenizer.encode(rows["prompt"][0][0]["content"])) < tokenizer.convert_tokens_to_ids("<reserved_0>")


def test_prompt_lengths_spread(assets):
    from benchmarks.rl_real.make_real_assets import HI, LO

    lengths = json.loads((assets / "data/prompt_lengths.json").read_text(encoding="utf-8"))["train"]
    assert len(lengths) == 64 and all(LO <= n <= HI for n in lengths)
    ordered = sorted(lengths)
    assert 120 < ordered[32] < 320 and ordered[-1] > 2 * ordered[0]  # a spread, not one length


def test_reward_separates_reserved_token_responses(assets):
    from transformers import AutoTokenizer
    from verl.utils.import_utils import load_extern_object

    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    score = load_extern_object(str(REPO / "specs/rewards/tiny_arith.py"), "compute_score")
    first = tokenizer.convert_tokens_to_ids("<reserved_0>")
    responses = [tokenizer.decode(list(range(first + k, 151936, 997 + 31 * k))[:64], skip_special_tokens=True)
                 for k in range(8)]
    scores = {score("openai/gsm8k", r, "7") for r in responses}
    assert len(scores) > 1
