"""Files a real verl launch reads before it asks Ray for GPUs, made in the test's tmp folder.

- a model folder: the model's real ``config.json`` (the catalog entry, transcribed verbatim from the hub) and
  a small word-level tokenizer with a chat template (verl builds the tokenizer and the HF config from the
  folder; no weights are read before the GPU request);
- parquet files in verl's RL data layout (``prompt`` as chat messages, ``data_source``, ``reward_model``).

Nothing here stands in for verl or Ray: these are the inputs a user provides on a cluster, made small.
"""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
WORDS = ["user", "assistant", "system", "what", "is", "the", "sum", "of", "and", "answer", "think", "step", "by",
         "+", "=", "?", ".", ","] + [str(i) for i in range(100)]


def write_model(folder: Path, config: dict) -> Path:
    """A model folder verl can build its tokenizer and HF config from."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return folder


def write_parquet(path: Path, rows: int = 64) -> Path:
    """``rows`` arithmetic prompts in verl's RL layout."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    records = [{
        "data_source": "fp8spec-test",
        "prompt": [{"role": "user", "content": f"what is the sum of {i % 50} and {i % 7} ?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(i % 50 + i % 7)},
        "extra_info": {"index": i},
    } for i in range(rows)]
    pd.DataFrame.from_records(records).to_parquet(path)
    return path
