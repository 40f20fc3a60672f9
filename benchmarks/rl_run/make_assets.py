"""The three inputs of the one-H200 FP8 RL run, made offline: a tiny Qwen3 model, its tokenizer, a dataset.

    python -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl     # model/, data/train.parquet, data/test.parquet
    python -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl \
        --config specs/models/tiny-qwen3-moe/config.json --model-dir model-moe   # the MoE of the Megatron run

* model/: Qwen3 architecture with the shape in specs/models/tiny-qwen3/config.json (hidden 1024, intermediate
  3072, 8 heads / 4 KV heads of 128, 4 layers: every linear is a whole number of 128x128 blocks, so vLLM
  quantizes each one), random weights from transformers' own initialiser (seed 0), saved as safetensors, BF16.
* model/tokenizer.json etc.: a byte-level BPE trained here with `tokenizers` on the dataset's own text, padded
  with reserved special tokens to exactly the model's vocab_size, saved in Hugging Face format with Qwen's
  ChatML chat template (verl applies the tokenizer's chat template to each prompt). The padding matters: verl's
  vLLM server sets every logit at or past len(tokenizer) to -inf (vllm_async_server.py 503,
  vllm_rollout/utils.py 106-126) and the trainer does not, so with a shorter tokenizer the rollout samples
  from fewer tokens than the trainer scores, and on a random model that alone reads as a mismatch KL of
  log(vocab_size / len(tokenizer)) (2.03 on an H200 run with a shorter tokenizer).
* data/*.parquet: arithmetic word problems in verl's RL format (`data_source` openai/gsm8k, chat `prompt`,
  `reward_model.ground_truth`), scored by verl's shipped GSM8K rule (`#### <answer>` in the response).

Nothing is downloaded; the same seed gives the same files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parents[1] / "specs" / "models" / "tiny-qwen3" / "config.json"
# Qwen's ChatML: verl 0.9.1's agent loop picks its token builder from model_type qwen3
# (verl/utils/tokenizer/continuous_token_wiring.py), which needs <|im_end|> and a one-token "\n"
# (continuous_token.py QwenContinuousTokenBuilder).
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def problems(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
        q = (f"A farmer has {a} apples and buys {b} more. He packs them into bags of {c} and eats the rest. "
             f"How many full bags does he have? Think step by step and end with '#### <number>'.")
        answer = (a + b) // c
        rows.append({"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": q}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(answer)},
                     "extra_info": {"split": "train", "index": i,
                                    "answer": f"{a} + {b} = {a + b}; {a + b} // {c} = {answer}\n#### {answer}"}})
    return rows


def train_and_test(n_train: int, n_test: int) -> tuple[list[dict], list[dict], list[str]]:
    """The train and test rows (seeds 0 and 1), and the texts the tokenizer is trained on."""
    train, test = problems(n_train, 0), problems(n_test, 1)
    for row in test:
        row["extra_info"]["split"] = "test"
    texts = [r["prompt"][0]["content"] + " " + r["extra_info"]["answer"] for r in train + test]
    return train, test, texts


def train_bpe(texts: list[str], vocab_size: int):
    """A byte-level BPE trained on ``texts`` (at most ``vocab_size`` entries, the chat template's specials first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def chat_tokenizer(tok):
    """``tok`` as the transformers tokenizer verl loads: ChatML's end and pad tokens, no BOS, the chat template."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(config: dict, tokenizer):
    """transformers' config of ``config`` (a config.json) with the tokenizer's special token ids."""
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    cfg.architectures = config["architectures"]
    cfg.eos_token_id = tokenizer.eos_token_id
    cfg.pad_token_id = tokenizer.pad_token_id
    cfg.bos_token_id = None
    return cfg


def build_tokenizer(texts: list[str], vocab_size: int):
    tok = train_bpe(texts, vocab_size)
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(vocab_size - tok.get_vocab_size())])
    return chat_tokenizer(tok)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--train", type=int, default=512)
    ap.add_argument("--test", type=int, default=64)
    ap.add_argument("--config", type=Path, default=CONFIG, help="the model's config.json (default: tiny-qwen3)")
    ap.add_argument("--model-dir", default="model", help="folder under --out for the model (default: model)")
    a = ap.parse_args()
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM

    config = json.loads(a.config.read_text(encoding="utf-8"))
    train, test, texts = train_and_test(a.train, a.test)
    tokenizer = build_tokenizer(texts, config["vocab_size"])
    assert len(tokenizer) == config["vocab_size"], (len(tokenizer), config["vocab_size"])
    model_dir = a.out / a.model_dir
    if (model_dir / "model.safetensors").is_file() and (a.out / "data" / "test.parquet").is_file():
        # another run set on this machine made them (same seed, same bytes); rewriting files that running
        # trainers may still read is what must not happen
        print(f"make_assets: {model_dir} exists, kept")
        return 0
    tokenizer.save_pretrained(model_dir)
    cfg = model_config(config, tokenizer)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True)
    data_dir = a.out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(train).to_parquet(data_dir / "train.parquet", index=False)
    pd.DataFrame(test).to_parquet(data_dir / "test.parquet", index=False)
    print(f"make_assets: {model_dir} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M params, "
          f"vocab {len(tokenizer)}), {data_dir}/train.parquet ({len(train)} rows), test.parquet ({len(test)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
