"""Where a trainer pass over one RL sequence spends its time without flash-attn: the decoder stack alone, verl
0.9.1's default log-prob path, and verl's fused (chunked) log-prob path, on one GPU.

    python -m benchmarks.rl_real.bench_logprob --config benchmarks/rl_real/models/qwen3-4b/config.json \
        --tokens 2300 --json out/logprob.json          # on the H200: about a minute

Without the flash-attn package, verl's `logprobs_from_logits` falls back to `logprobs_from_logits_v2`, which
loops over the rows of the logits in Python: one `log_softmax` per token (BF16 logits), so a 2,300-token sequence
launches thousands of small kernels in each pass, and as many autograd nodes in the update's backward. verl's
`use_fused_kernels` (torch backend, `verl/utils/experimental/torch_functional.py` FusedLinearForPPO) computes
log-probs and entropy from the hidden states in chunks of 512 tokens instead. This script times, per pass over one
sequence (the window base's micro-batch: one sequence, `training.attention: sdpa`, one GPU, no FSDP wrapper):

* body: the decoder stack to its last hidden states (what no log-prob path can avoid);
* logits: verl's default path: lm_head, `logprobs_from_logits`, and in the old-log-prob pass `entropy_from_logits`;
* fused: verl's fused path (`patch_forward_with_backends(..., use_fused_kernels=True, "torch")`);
* naive: lm_head and one vectorised `log_softmax` (verl's `logprobs_from_logits_naive`), the loop's lower bound.

Two passes each: "old log-prob" (no grad, log-probs and entropy, as verl's compute_log_prob) and "update"
(forward with grad, log-probs, backward of their mean, as verl's update with entropy_coeff 0). The paths'
log-probs are compared (max absolute difference against the naive path in float32), and so are their output
layer's gradients (relative norm of the difference): the fused backward sums that gradient over its chunks in
the weight's dtype. Nothing is downloaded: the
model is random (transformers' initialiser, seed 0) at the config's shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable


def build_model(config_path: Path, device: str, dtype_name: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**json.loads(config_path.read_text(encoding="utf-8")))
    cfg._attn_implementation = "sdpa"
    dtype = getattr(torch, dtype_name)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    return model.train()


def paths(model) -> dict[str, Callable]:
    """name -> f(input_ids, position_ids, labels, entropy) -> (log_probs or None, entropy or None, scalar)."""
    import torch
    from verl.models.transformers.dense_common import forward_with_torch_backend
    from verl.utils import torch_functional as verl_F

    def body(ids, pos, labels, entropy):
        h = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state
        return None, None, h.float().mean()

    def logits(ids, pos, labels, entropy):
        out = model(input_ids=ids, position_ids=pos, use_cache=False).logits.squeeze(0)
        lp = verl_F.logprobs_from_logits(out, labels, inplace_backward=not entropy)
        ent = verl_F.entropy_from_logits(out) if entropy else None
        return lp, ent, lp.mean()

    def naive(ids, pos, labels, entropy):
        out = model(input_ids=ids, position_ids=pos, use_cache=False).logits.squeeze(0)
        lp = verl_F.logprobs_from_logits_naive(out.float(), labels)
        ent = verl_F.entropy_from_logits(out) if entropy else None
        return lp, ent, lp.mean()

    def fused(ids, pos, labels, entropy):
        model._verl_fused_kernels_backend = "torch"
        # verl rolls the labels itself: shift_labels are the next tokens, as the logits paths' labels
        out = forward_with_torch_backend(
            model,
            input_ids=ids,
            position_ids=pos,
            use_cache=False,
            shift_labels=labels.unsqueeze(0),
            return_dict=True,
            temperature=1.0,
        )
        lp = out.log_probs.squeeze(0)
        return lp, (out.entropy.squeeze(0) if entropy else None), lp.mean()

    del torch
    return {"body": body, "logits": logits, "fused": fused, "naive": naive}


def time_pass(fn: Callable, args: tuple, grad: bool, repeats: int, sync: Callable[[], None]) -> list[float]:
    import torch

    times = []
    for _ in range(repeats + 1):  # the first pass warms up (allocator, kernels' autotuning)
        sync()
        t0 = time.perf_counter()
        with torch.set_grad_enabled(grad):
            _, _, scalar = fn(*args, entropy=not grad)
            if grad:
                scalar.backward()
        sync()
        times.append(time.perf_counter() - t0)
    return times[1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--config", type=Path, required=True, help="a Qwen3 config.json (the shape; weights random)"
    )
    ap.add_argument("--tokens", type=int, default=2300, help="tokens of the one sequence (prompt + response)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)

    import torch

    model = build_model(a.config, a.device, a.dtype)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (1, a.tokens), generator=gen).to(a.device)
    pos = torch.arange(a.tokens, device=a.device).unsqueeze(0)
    labels = torch.roll(ids, shifts=-1, dims=-1).squeeze(0)
    args = (ids, pos, labels)

    ways = paths(model)
    with torch.no_grad():
        ref = ways["naive"](*args, entropy=False)[0].float()
        agree = {
            name: float((ways[name](*args, entropy=False)[0].float() - ref).abs().max())
            for name in ("logits", "fused")
        }
    grads = {}
    for name in ("naive", "fused", "logits"):
        model.zero_grad(set_to_none=True)
        ways[name](*args, entropy=False)[2].backward()
        grads[name] = model.lm_head.weight.grad.float().clone()
    model.zero_grad(set_to_none=True)
    ref_norm = float(grads["naive"].norm())
    # the fused backward sums the output layer's gradient over its 512-token chunks in the weight's dtype
    grad_diff = {
        name: float((grads[name] - grads["naive"]).norm()) / ref_norm for name in ("fused", "logits")
    }
    del grads
    result: dict = {
        "config": str(a.config),
        "tokens": a.tokens,
        "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else a.device,
        "dtype": a.dtype,
        "repeats": a.repeats,
        "max_abs_diff_vs_naive": agree,
        "lm_head_grad_rel_diff_vs_naive": grad_diff,
        "seconds": {},
    }
    for pass_name, grad in (("old_log_prob", False), ("update", True)):
        for name, fn in ways.items():
            model.zero_grad(set_to_none=True)
            t = time_pass(fn, args, grad, a.repeats, sync)
            result["seconds"][f"{pass_name}.{name}"] = {"median": statistics.median(t), "all": t}
            print(
                f"bench_logprob: {pass_name:>12} {name:>6}: {1e3 * statistics.median(t):9.1f} ms", flush=True
            )
    print(f"bench_logprob: max |log-prob - naive|: {agree}; output layer's gradient, relative: {grad_diff}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
