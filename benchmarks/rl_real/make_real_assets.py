"""The inputs of the real-size RL runs, made offline on the device: a random-initialised Qwen3 of a
real shape, its tokenizer, and the parquet data.

    python -m benchmarks.rl_real.make_real_assets --out /tmp/fp8spec-real \
        --config benchmarks/rl_real/models/qwen3-4b/config.json --model-dir model-4b      # on the GPU: seconds

* model/: Qwen3 with the catalog's shape (models/*/config.json = fp8spec's catalog entry), random weights from
  transformers' own initialiser (seed 0), built directly on --device (cuda on the H200: no CPU-side
  initialisation of billions of parameters on 16 cores) and written as BF16 safetensors shards of at most 2 GB.
* tokenizer: a byte-level BPE trained on the data's text (rl_run/make_assets.py's ChatML template and special
  tokens), then padded to exactly vocab_size (151,936) with plain vocabulary entries `<reserved_N>` that no
  merge produces. Exact length matters (rl_run/make_assets.py: verl's rollout masks logits past len(tokenizer),
  the trainer does not). Plain entries, not added special tokens: on the CPU machine 151,413 added special
  tokens took 21 s to build, 27 s to load and 29 MB (every verl worker and the engine load it), plain entries
  7 s, 6 s and 5 MB. A random model mostly samples `<reserved_N>`, which decodes to text with digits, so the
  partial-credit reward (specs/rewards/tiny_arith.py) differs within a group and GRPO's advantages are not 0.
* data/train.parquet: 6 steps x 32 prompts (5 steps of the run + one spare); data/test.parquet: 16. Prompt
  lengths (chat template included, in this tokenizer's tokens) are drawn from a log-normal with median 192
  tokens and sigma 0.6, clipped to [48, 1000] (max_prompt_length is 1024): about the spread of math-RL
  prompt sets (most 100-400 tokens, a tail to ~1K). Each prompt is grown to at least its draw, so the made
  lengths run a little longer (median 212, 57-925 for the 192 train rows). Each prompt is an arithmetic word
  problem padded with more problem sentences to its drawn length; data/prompt_lengths.json lists the
  lengths (row order = verl's order with data.shuffle=false, which run_h200_real.sh sets).

Nothing is downloaded; the same seed gives the same files.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

from benchmarks.rl_run.make_assets import chat_tokenizer, model_config, problems, train_and_test, train_bpe

MEDIAN, SIGMA, LO, HI = 192, 0.6, 48, 1000


def build_tokenizer(texts: list[str], vocab_size: int):
    """The tiny runs' tokenizer, padded with plain vocabulary entries instead of added special tokens (a
    tokenizer.json of 5 MB instead of 29, loaded in 6 s instead of 27 by every worker and the engine)."""
    from tokenizers import Tokenizer

    data = json.loads(train_bpe(texts, vocab_size).to_str())
    vocab = data["model"]["vocab"]
    trained = len(vocab)
    vocab.update({f"<reserved_{i}>": trained + i for i in range(vocab_size - trained)})
    return chat_tokenizer(Tokenizer.from_str(json.dumps(data)))


def prompt_lengths(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [min(HI, max(LO, round(math.exp(rng.gauss(math.log(MEDIAN), SIGMA))))) for _ in range(n)]


def chat_len(tokenizer, text: str) -> int:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def pad_prompts(rows: list[dict], lengths: list[int], filler: list[str], tokenizer) -> list[int]:
    """Grow each row's prompt with filler sentences to at least its drawn length; returns the lengths made."""
    made = []
    for i, (row, want) in enumerate(zip(rows, lengths, strict=True)):
        msg = row["prompt"][0]
        question = msg["content"]
        context: list[str] = []
        k = i
        while chat_len(tokenizer, " ".join(context + [question])) < want:
            context.append(filler[k % len(filler)].split(" Think step")[0])
            k += 7
        # drop whole sentences that overshoot the clip bound (the question itself is kept)
        while context and chat_len(tokenizer, " ".join(context + [question])) > HI:
            context.pop()
        msg["content"] = " ".join(context + [question])
        made.append(chat_len(tokenizer, msg["content"]))
    return made


def save_model(config: dict, model_dir: Path, tokenizer, device: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    cfg = model_config(config, tokenizer)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True, max_shard_size="2GB")
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--config", required=True, type=Path, help="the model's config.json (models/*/config.json)")
    ap.add_argument("--model-dir", required=True, help="folder under --out for the model")
    ap.add_argument("--train", type=int, default=6 * 32)
    ap.add_argument("--test", type=int, default=16)
    ap.add_argument("--device", default="cuda", help="where the weights are initialised (cuda, or cpu)")
    a = ap.parse_args(argv)
    import pandas as pd

    t0 = time.perf_counter()
    config = json.loads(a.config.read_text(encoding="utf-8"))
    model_dir = a.out / a.model_dir
    data_dir = a.out / "data"
    if (model_dir / "config.json").is_file() and (data_dir / "test.parquet").is_file():
        print(f"make_real_assets: {model_dir} exists, kept")  # same seed, same bytes; a running trainer reads them
        return 0
    train, test, texts = train_and_test(a.train, a.test)
    tokenizer = build_tokenizer(texts, config["vocab_size"])
    assert len(tokenizer) == config["vocab_size"], (len(tokenizer), config["vocab_size"])
    filler = [r["prompt"][0]["content"] for r in problems(64, 2)]
    lengths = {"train": pad_prompts(train, prompt_lengths(a.train, 0), filler, tokenizer),
               "test": pad_prompts(test, prompt_lengths(a.test, 1), filler, tokenizer)}
    t_tok = time.perf_counter() - t0
    data_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(train).to_parquet(data_dir / "train.parquet", index=False)
    pd.DataFrame(test).to_parquet(data_dir / "test.parquet", index=False)
    (data_dir / "prompt_lengths.json").write_text(json.dumps(lengths) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(model_dir)
    params = save_model(config, model_dir, tokenizer, a.device)
    tr = sorted(lengths["train"])
    print(f"make_real_assets: {model_dir} ({params / 1e9:.2f} B params, vocab {len(tokenizer)}, "
          f"{time.perf_counter() - t0:.0f} s, tokenizer + data {t_tok:.0f} s); {data_dir}/train.parquet "
          f"({len(train)} rows, prompt tokens min {tr[0]} median {tr[len(tr) // 2]} max {tr[-1]}), "
          f"test.parquet ({len(test)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
