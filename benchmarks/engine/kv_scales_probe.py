"""Are pushed FP8 KV scales really used by the real vLLM engine, CUDA graphs included, across verl's wake-up?

    python -m benchmarks.engine.kv_scales_probe --out DIR      # both models, both engines, then the verdicts

Tiny Qwen3 models (dense -> vLLM 0.24's V2 model runner; MoE -> the V1 runner), random-initialised and saved
with transformers (lm_head scaled up so greedy decoding has clear margins), FP8 (e4m3) KV cache, BF16 linears.
One process per engine:

* ``graph``: CUDA graphs + torch.compile as vLLM defaults (graphs captured at start, before any push), sleep
  mode on, ``calculate_kv_scales=True`` (the mapping of ``recalibrate: once``) to see when it calibrates.
  Phases: (1) fp8spec's writes *without* the wake-up keeper (``probe_raw_set``, the control) across
  verl's update sequence ``sleep(2) -> wake(weights) -> load weights + write scales -> wake(kv_cache)``;
  (2) the same with fp8spec's ``fp8spec_set_kv_scales`` (writes + keeper); (3) scale switching under captured
  graphs: S_clip, S_cal, S_clip again.
* ``eager``: ``enforce_eager=True`` (nothing captured), the same scales pushed: the reference.

Each generation: 4 prompts of 48 random tokens, greedy, 12 new tokens, the sampled tokens' log-probs.
Verdicts (written to DIR/kv_probe_verdicts.json): scales change the outputs; switching back reproduces the
earlier outputs bit for bit under captured graphs; graph outputs match the eager reference per scale set;
the V1 reset is reproduced without the keeper and gone with it; what ``calculate_kv_scales`` did at start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmarks.common.cli import child_env, default_out, run_logged

MODULE = "benchmarks.engine.kv_scales_probe"
TINY = {
    "dense": {"model_type": "qwen3", "vocab_size": 8192, "hidden_size": 1024, "intermediate_size": 3072,
                  "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
                  "max_position_embeddings": 4096, "tie_word_embeddings": False, "rope_theta": 1000000.0},
    "moe": {"model_type": "qwen3_moe", "vocab_size": 8192, "hidden_size": 1024, "intermediate_size": 3072,
                "moe_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
                "norm_topk_prob": True, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
                "head_dim": 128, "max_position_embeddings": 4096, "tie_word_embeddings": False, "rope_theta": 1000000.0},
}
SCALES = {"unit": (1.0, 1.0, 1.0), "clip": (0.004, 0.004, 0.002), "cal": (0.02, 0.02, 0.01)}


def make_tiny(kind: str, root: Path) -> Path:
    folder = root / f"tiny-{kind}"
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(TINY[kind])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked next-token distributions: greedy decoding with clear margins
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def scales_for(layers: list[str], which: str) -> list[tuple[str, float]]:
    q, k, v = SCALES[which]
    return [(f"{layer}.{kind}_scale", val) for layer in layers for kind, val in (("q", q), ("k", k), ("v", v))]


def run_engine(kind: str, engine: str, model_path: str, out: Path) -> None:
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    eager = engine == "eager"
    llm = LLM(model=model_path, skip_tokenizer_init=True, kv_cache_dtype="fp8_e4m3", seed=0,
              calculate_kv_scales=not eager, enforce_eager=eager, enable_sleep_mode=not eager,
              gpu_memory_utilization=0.25, max_model_len=1024, max_num_seqs=16,
              enable_prefix_caching=False, worker_extension_cls="benchmarks.engine.kv_probe_ext.ProbeExt")
    rpc = lambda name, *a: llm.collective_rpc(name, args=a)[0]  # noqa: E731 - one worker (TP 1)
    gen = torch.Generator().manual_seed(1)
    prompts = [TokensPrompt(prompt_token_ids=torch.randint(0, 8192, (48,), generator=gen).tolist())
               for _ in range(4)]
    params = SamplingParams(temperature=0.0, max_tokens=12, logprobs=0, ignore_eos=True, detokenize=False)

    def generate():
        res = []
        for o in llm.generate(prompts, params, use_tqdm=False):
            c = o.outputs[0]
            res.append({"tokens": list(c.token_ids),
                        "logprobs": [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]})
        return res

    record = {"kind": kind, "engine": engine, "runner": rpc("probe_runner"),
              "scales_at_start": rpc("probe_read_scales")}
    layers = rpc("probe_layer_names")

    def first(scales):  # layer 0's [q, k, v, k_float, v_float]
        return scales[sorted(scales)[0]]

    runs = {}
    if eager:
        for which in ("unit", "clip", "cal"):
            rpc("fp8spec_set_kv_scales", scales_for(layers, which))
            runs[which] = generate()
    else:
        rpc("probe_snapshot_weights")
        # calculate_kv_scales calibrates on the first forward that reaches attention with the flag set:
        # record whether the profiling run at start took it, then let one generation consume it
        generate()
        record["scales_after_first_generate"] = rpc("probe_read_scales")

        def verl_update(write_method: str, which: str):
            llm.sleep(level=2)  # verl HYBRID: level 2 for full-weight sync (vllm_async_server.py 1308-1316)
            llm.wake_up(tags=["weights"])
            rpc("probe_restore_weights")  # the weight update (same values)
            rpc(write_method, scales_for(layers, which))
            llm.wake_up(tags=["kv_cache"])
            return first(rpc("probe_read_scales"))

        # phase 1: writes without the keeper (the control: what the keeper prevents)
        rpc("probe_raw_set", scales_for(layers, "unit"))
        runs["unit"] = generate()
        rpc("probe_raw_set", scales_for(layers, "clip"))
        runs["clip"] = generate()
        record["raw_scales_after_wake"] = verl_update("probe_raw_set", "clip")
        runs["clip_after_wake_raw"] = generate()
        # phase 2: fp8spec_set_kv_scales (writes + keeper)
        record["kept_scales_after_wake"] = verl_update("fp8spec_set_kv_scales", "clip")
        runs["clip_after_wake_kept"] = generate()
        # phase 3: switching scales under the graphs captured at start
        rpc("fp8spec_set_kv_scales", scales_for(layers, "cal"))
        runs["cal"] = generate()
        rpc("fp8spec_set_kv_scales", scales_for(layers, "clip"))
        runs["clip_again"] = generate()
    record["runs"] = runs
    (out / f"kv_probe_{kind}_{engine}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")


def _same(a, b) -> bool:
    return a == b  # tokens and log-probs, bit for bit (floats compare exactly)


def _max_lp_diff(a, b) -> tuple[float, int]:
    """Largest |log-prob difference| over positions where both runs chose the same tokens so far."""
    worst, n = 0.0, 0
    for ra, rb in zip(a, b):
        for ta, tb, la, lb in zip(ra["tokens"], rb["tokens"], ra["logprobs"], rb["logprobs"]):
            if ta != tb:
                break
            worst, n = max(worst, abs(la - lb)), n + 1
    return worst, n


def verdicts(out: Path) -> dict:
    v = {}
    for kind in TINY:
        g = json.loads((out / f"kv_probe_{kind}_graph.json").read_text())
        e = json.loads((out / f"kv_probe_{kind}_eager.json").read_text())
        gr, er = g["runs"], e["runs"]
        noise, n_noise = _max_lp_diff(gr["unit"], er["unit"])
        match_clip, n_clip = _max_lp_diff(gr["clip"], er["clip"])
        effect, n_eff = _max_lp_diff(gr["unit"], gr["clip"])
        v[kind] = {
            "runner": g["runner"],
            "calculate_kv_scales_at_start_layer0": g["scales_at_start"][sorted(g["scales_at_start"])[0]],
            "calculate_kv_scales_after_first_generate_layer0":
                g["scales_after_first_generate"][sorted(g["scales_after_first_generate"])[0]],
            "scales_change_outputs": not _same(gr["unit"], gr["clip"]),
            "graph_vs_eager_unit_max_dlogprob": [noise, n_noise],
            "graph_vs_eager_clip_max_dlogprob": [match_clip, n_clip],
            "unit_vs_clip_max_dlogprob_graph": [effect, n_eff],
            "switch_back_bit_identical": _same(gr["clip"], gr["clip_again"]),
            "cal_differs_from_clip": not _same(gr["cal"], gr["clip"]),
            "raw_write_scales_after_wake_layer0": g["raw_scales_after_wake"],
            "raw_write_lost_after_wake": _same(gr["clip_after_wake_raw"], gr["unit"]),
            "kept_scales_after_wake_layer0": g["kept_scales_after_wake"],
            "kept_write_survives_wake": _same(gr["clip_after_wake_kept"], gr["clip"]),
        }
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out("kv_scales_probe"), help="default: %(default)s")
    ap.add_argument("--one", nargs=3, metavar=("KIND", "ENGINE", "MODEL_PATH"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        run_engine(a.one[0], a.one[1], a.one[2], a.out)
        return 0
    env = child_env(dict(os.environ, VLLM_USE_FLASHINFER_SAMPLER="0", PYTHONUNBUFFERED="1"))
    rc = 0
    for kind in TINY:
        path = make_tiny(kind, Path("/tmp/fp8spec-models"))
        for engine in ("graph", "eager"):
            if run_logged([sys.executable, "-m", MODULE, "--out", str(a.out), "--one", kind, engine, str(path)], env,
                          a.out / f"kv_probe_{kind}_{engine}.log", 400, f"kv_probe {kind} {engine}", 2000) != 0:
                rc = 1
    if rc == 0:
        result = verdicts(a.out)
        (a.out / "kv_probe_verdicts.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(json.dumps(result, indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
