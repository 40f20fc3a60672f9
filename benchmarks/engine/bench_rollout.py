"""Rollout throughput of one real vLLM engine configuration (run once per configuration, in its own process).

    python -m benchmarks.engine.bench_rollout --model qwen3-8b --mode fp8 --deep-gemm 0 \
        --util 0.6 --max-model-len 8192 --prompts 256 --prompt-len 1024 --output-len 1536 --json out/engine/8b.json

A rollout-shaped workload (``benchmarks.common.workload``): ``--prompts`` random-token prompts submitted at once
(as verl submits a step's ``train_batch_size x n`` sequences), sampled at temperature 1 with ``ignore_eos`` so
every sequence makes exactly ``--output-len`` tokens; weights are vLLM's dummy init at the model's real shapes; CUDA graphs and
torch.compile at vLLM's defaults. Modes: bf16, fp8 (W8A8 blockwise 128x128 exactly as verl 0.9.1 configures
it), fp8kv (fp8 + fp8_e4m3 KV cache). Writes one JSON record (throughput, KV capacity, memory facts from the
engine's log) to ``--json``; the engine log goes to stderr.

    python -m benchmarks.engine.bench_rollout --bundle .rl/bundles/real-4b-h200-fp8kv --step 1 --json out/bare.json

With ``--bundle`` everything comes from a compiled fp8spec bundle instead (benchmarks/rl_real/bundle_engine.py):
the engine arguments verl's vLLM server would pass, the step's real prompts (rendered by verl's token builder,
each repeated rollout.n times), verl's sampling (no ignore_eos: sequences stop where the model stops), and the
share of one rollout replica when the bundle has several (one GPU runs it; run it on each GPU for all).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common import workload
from benchmarks.engine.engine_common import MODELS, engine_kwargs


def timed_generates(llm, prompts, params, repeats: int):
    """The batch generated ``repeats`` times (at least once), the prefix cache reset between, so that each repeat
    prefills its prompts again as the loop's next step would: the last outputs and every run's seconds."""
    runs_s = []
    for i in range(max(repeats, 1)):
        if i:
            llm.reset_prefix_cache()
        t1 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        runs_s.append(round(time.perf_counter() - t1, 2))
    return outs, runs_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    workload.add_arguments(ap, required=False)
    ap.add_argument("--bundle", help="a compiled bundle folder: engine, prompts and sampling as verl runs them")
    ap.add_argument("--step", type=int, default=1, help="with --bundle: the training step whose prompts to run")
    ap.add_argument("--replica", type=int, default=0, help="with --bundle: which rollout replica's share")
    ap.add_argument("--repeats", type=int, default=1,
                    help="generate the batch this many times (prefix cache reset between); the last is the "
                         "figure, the first carries the kernels' first-use compilation")
    ap.add_argument("--max-num-seqs", type=int, default=None,
                    help="vLLM's max_num_seqs (default: vLLM's own); 256 is verl's rollout.max_num_seqs")
    ap.add_argument("--json", type=Path, default=Path("out/engine/bench_rollout.json"),
                    help="where the record goes (default: %(default)s)")
    args = ap.parse_args()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    if args.bundle:
        return bench_bundle(args)
    if not (args.model and args.mode):
        ap.error("--model and --mode are required without --bundle")

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model_id = MODELS[args.model]
    t0 = time.perf_counter()
    extra = {} if args.max_num_seqs is None else {"max_num_seqs": args.max_num_seqs}
    llm = LLM(**engine_kwargs(model_id, args.mode, args.util, args.max_model_len, **extra))
    start_s = time.perf_counter() - t0

    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in workload.random_prompts(args.prompts, args.prompt_len)]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=args.output_len, ignore_eos=True,
                            detokenize=False, seed=0)
    warm = SamplingParams(temperature=1.0, max_tokens=32, ignore_eos=True, detokenize=False)
    llm.generate(prompts[:workload.WARMUP_PROMPTS], warm, use_tqdm=False)

    outs, runs_s = timed_generates(llm, prompts, params, args.repeats)
    gen_s = runs_s[-1]
    out_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    preemptions = None
    try:
        for metric in llm.get_metrics():
            if metric.name == "vllm:num_preemptions":
                preemptions = int(metric.value)
    except Exception as exc:  # metrics are a nicety; the throughput is the result
        print(f"bench_rollout: no metrics ({exc})", file=sys.stderr)
    record = {
        "model": model_id, "mode": args.mode, "deep_gemm": bool(args.deep_gemm), "util": args.util,
        "max_model_len": args.max_model_len, "prompts": args.prompts, "prompt_len": args.prompt_len,
        "output_len": args.output_len, "max_num_seqs": args.max_num_seqs,
        "engine_start_s": round(start_s, 1), "generate_s": round(gen_s, 2), "generate_runs_s": runs_s,
        **workload.throughput(args, out_tokens, gen_s),
        "preemptions": preemptions, "vllm_use_deep_gemm": os.environ.get("VLLM_USE_DEEP_GEMM"),
    }
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
    print(json.dumps(record), file=sys.stderr)
    return 0


def bench_bundle(args) -> int:
    """One training step's generation as a bare vllm.LLM, everything read from the bundle."""
    from benchmarks.rl_real import bundle_engine as be

    cfg = be.compose(Path(args.bundle))
    kwargs = be.engine_kwargs(cfg, replica_rank=args.replica)
    n_rep = be.replicas(cfg)
    # the agent loop spreads a step's requests over the replicas; one replica's share, in the trainer's order
    prompts_ids = be.step_prompts(cfg, args.step)[args.replica::n_rep]

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    start_s = time.perf_counter() - t0
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in prompts_ids]
    sampling = [be.sampling_kwargs(cfg, len(ids), kwargs["max_model_len"]) for ids in prompts_ids]
    params = [SamplingParams(**s) for s in sampling]
    # warm-up on reversed prompts: the timed prompts must not find their prefixes cached by it
    warm = [TokensPrompt(prompt_token_ids=ids[::-1]) for ids in prompts_ids[:16:8]]
    llm.generate(warm, SamplingParams(temperature=1.0, max_tokens=32), use_tqdm=False)

    outs, runs_s = timed_generates(llm, prompts, params, args.repeats)
    gen_s = runs_s[-1]
    lengths = [len(o.outputs[0].token_ids) for o in outs]
    preempted = [getattr(o.outputs[0], "num_preempted", None) for o in outs]
    finish: dict[str, int] = {}
    for o in outs:
        finish[str(o.outputs[0].finish_reason)] = finish.get(str(o.outputs[0].finish_reason), 0) + 1
    record = {
        "bundle": os.path.basename(os.path.normpath(args.bundle)), "step": args.step, "replica": args.replica,
        "replicas": n_rep, "sequences": len(prompts), "prompt_tokens": sum(map(len, prompts_ids)),
        "engine_start_s": round(start_s, 1), "generate_s": gen_s, "generate_runs_s": runs_s,
        "output_tokens": sum(lengths),
        "response_length_mean": round(sum(lengths) / len(lengths), 1), "output_tok_per_s": round(sum(lengths) / gen_s, 1),
        "preemptions": None if None in preempted else sum(preempted), "finish_reasons": finish,
        "engine_kwargs": kwargs, "sampling_first": sampling[0],
    }
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, default=str)
    print(json.dumps({k: v for k, v in record.items() if k != "engine_kwargs"}, default=str), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
