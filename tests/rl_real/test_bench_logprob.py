"""The trainer log-prob benchmark runs on the CPU at a tiny shape: verl's default (row loop) and fused paths give
the same log-probs as one vectorised log_softmax, so on the GPU it times the same computation three ways."""

from __future__ import annotations

import json

import pytest

from benchmarks.rl_real import bench_logprob
from tests.conftest import REPO, require

require("verl")

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "bos_token_id": 0,
    "eos_token_id": 1,
}


@pytest.mark.parametrize(("dtype", "tol"), [("float32", 1e-4), ("bfloat16", 0.1)])
def test_the_three_log_prob_paths_agree_and_every_pass_is_timed(tmp_path, dtype, tol):
    config = json.loads((REPO / "benchmarks/rl_real/models/qwen3-4b/config.json").read_text(encoding="utf-8"))
    (tmp_path / "config.json").write_text(json.dumps({**config, **SHAPE}), encoding="utf-8")
    out = tmp_path / "out.json"
    args = ["--config", str(tmp_path / "config.json"), "--tokens", "200", "--device", "cpu", "--dtype", dtype]
    assert bench_logprob.main([*args, "--repeats", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    diffs = data["max_abs_diff_vs_naive"]
    assert set(diffs) == {"logits", "fused"} and all(0 <= d <= tol for d in diffs.values()), diffs
    grads = data["lm_head_grad_rel_diff_vs_naive"]
    assert set(grads) == {"logits", "fused"} and all(0 <= g <= tol for g in grads.values()), grads
    names = {f"{p}.{w}" for p in ("old_log_prob", "update") for w in ("body", "logits", "fused", "naive")}
    assert set(data["seconds"]) == names
    assert all(v["median"] > 0 and len(v["all"]) == 1 for v in data["seconds"].values())


def test_a_shifted_label_would_not_agree(tmp_path):
    """The agreement above can fail: log-probs of the wrong next token differ by whole nats."""
    import torch

    config = json.loads((REPO / "benchmarks/rl_real/models/qwen3-4b/config.json").read_text(encoding="utf-8"))
    (tmp_path / "config.json").write_text(json.dumps({**config, **SHAPE}), encoding="utf-8")
    model = bench_logprob.build_model(tmp_path / "config.json", "cpu", "float32")
    ways = bench_logprob.paths(model)
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(64).unsqueeze(0)
    labels = torch.roll(ids, -1, -1).squeeze(0)
    with torch.no_grad():
        right = ways["naive"](ids, pos, labels, entropy=False)[0]
        wrong = ways["fused"](ids, pos, torch.roll(labels, 1), entropy=False)[0]
    assert (right - wrong).abs().max() > 0.5
