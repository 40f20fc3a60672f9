"""benchmarks/rl_real/bundle_engine.py on CPU: a compiled bundle composed in real verl 0.9.1 gives the bare engine
the settings the spec compiled, the key list of verl's own vLLM server, the step's prompts in the trainer's order.
What cannot run here: vllm.LLM itself (bench_rollout.py --bundle runs on the H200)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import REPO, require
from tests.rl_real.conftest import SPECS

require("hydra")
require("verl")
from benchmarks.rl_real import bundle_engine as be  # noqa: E402  (after the skips: it imports verl)

MODELS = REPO / "benchmarks/rl_real/models"


def _cfg(bundles: Path, name: str, model: Path | None = None):
    cfg = be.compose(bundles / name)
    if model is not None:
        cfg.actor_rollout_ref.model.path = str(model)
    return cfg


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_engine_kwargs_are_the_specs(spec, bundles):
    s = YAML(typ="safe").load(spec.read_text(encoding="utf-8"))
    model = MODELS / ("qwen3-4b" if "-4b-" in spec.name else "qwen3-8b")
    cfg = _cfg(bundles, spec.stem, model)
    kw = be.engine_kwargs(cfg)
    assert kw["gpu_memory_utilization"] == s["rollout"]["gpu_memory_utilization"]
    assert kw["tensor_parallel_size"] == s["rollout"]["tp"]
    assert kw["quantization"] == ("fp8" if s["linear"]["quantize"] else None)
    assert bool(kw["hf_overrides"]) is s["linear"]["quantize"]
    assert kw.get("kv_cache_dtype") == (None if s["kv_cache"]["dtype"] == "bf16" else s["kv_cache"]["dtype"])
    assert kw["max_model_len"] == (40960 if "-4b-" in spec.name else 32768)  # max_position_embeddings
    assert kw["load_format"] == "dummy" and kw["enable_sleep_mode"] is True
    assert kw["compilation_config"] == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert be.replicas(cfg) == s["hardware"]["gpus_per_node"] // s["rollout"]["tp"]
    sampling = be.sampling_kwargs(cfg, 200, kw["max_model_len"])
    assert sampling == {"max_tokens": s["rollout"]["max_response_length"], "temperature": 1.0, "top_p": 1,
                        "top_k": -1, "repetition_penalty": 1.0, "logprobs": 0, "ignore_eos": False}
    # run_overrides.txt reached the composed tree
    assert cfg.data.shuffle is False and cfg.trainer.save_freq == -1 and cfg.trainer.test_freq == -1


def _verl_server_arg_keys() -> set[str]:
    """The keys of the `args = {...}` dict verl's vLLM server turns into `vllm serve` arguments."""
    spec = importlib.util.find_spec("verl")
    path = Path(list(spec.submodule_search_locations)[0]) / "workers/rollout/vllm_rollout/vllm_async_server.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "args" for t in node.targets)):
            keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
            if "load_format" in keys:
                return keys
    raise AssertionError("verl's vLLM server builds no args dict with load_format")


def test_kwargs_keys_are_verls_server_args(bundles):
    kw = be.engine_kwargs(_cfg(bundles, "real-4b-h200-fp8kv", MODELS / "qwen3-4b"))
    extra = {"kv_cache_dtype"}  # engine_kwargs.vllm, spread into args by verl
    assert set(kw) - extra - {"model"} == _verl_server_arg_keys()


def test_step_prompts_are_the_trainers_rows_in_order(bundles, small_assets):
    import pandas as pd
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    cfg = _cfg(bundles, "real-4b-h200-fp8", small_assets / "model")
    cfg.data.train_files = str(small_assets / "data/train.parquet")
    rows = pd.read_parquet(small_assets / "data/train.parquet")
    builder = create_continuous_token_builder(AutoTokenizer.from_pretrained(small_assets / "model"),
                                              hf_model_type="qwen3")
    batch, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    assert (batch, n) == (16, 8)
    for step in (1, 2):
        ids = be.step_prompts(cfg, step)
        assert len(ids) == batch * n
        for j in (0, 5, batch - 1):
            want = builder.build_initial_tokens(list(rows["prompt"][(step - 1) * batch + j]))
            assert ids[n * j: n * j + n] == [want] * n
    beyond = len(rows) // batch + 1  # the small data's 64 rows hold four full steps
    with pytest.raises(ValueError, match=f"no full step {beyond}"):
        be.step_prompts(cfg, beyond)
    cfg.data.shuffle = True
    with pytest.raises(ValueError, match="shuffle"):
        be.step_prompts(cfg, 1)


def test_bench_rollout_needs_a_model_or_a_bundle(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "benchmarks.engine.bench_rollout", "--json",
                           str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and "--model and --mode are required without --bundle" in proc.stderr


def test_the_weight_sync_run_changes_only_lengths_and_steps_and_passes_verls_validation(bundles):
    """RL_SYNC_RUN=1: sync_run_overrides.txt on the FP8 + FP8 KV 4B bundle composes in verl 0.9.1, passes
    its own validate_config, and leaves the engine, the trainer's budgets and the sync path as compiled."""
    require("ray")
    require("tensordict")
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    bundle = bundles / "real-4b-h200-fp8kv"
    extra = be.run_overrides(be.SYNC_RUN_OVERRIDES)
    assert extra == ["data.max_response_length=512", "trainer.total_training_steps=3"]
    base, cfg = be.compose(bundle), be.compose(bundle, extra)
    for c in (base, cfg):
        c.actor_rollout_ref.model.path = str(MODELS / "qwen3-4b")
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert (cfg.data.max_response_length, cfg.trainer.total_training_steps) == (512, 3)
    assert base.data.max_response_length == 2048
    # the rollout engine verl starts is the compiled one; only its generation default max_new_tokens and the
    # sampling's max_tokens follow the shorter responses
    short, full = be.engine_kwargs(cfg), be.engine_kwargs(base)
    assert short.pop("override_generation_config").pop("max_new_tokens") == 512
    assert full.pop("override_generation_config").pop("max_new_tokens") == 2048
    assert short == full
    assert be.sampling_kwargs(cfg, 200, 40960)["max_tokens"] == 512
    from omegaconf import OmegaConf

    rollout = [OmegaConf.to_container(c.actor_rollout_ref.rollout, resolve=True) for c in (cfg, base)]
    assert [r.pop("response_length") for r in rollout] == [512, 2048]
    assert rollout[0] == rollout[1]
    env = YAML(typ="safe").load((bundle / "runtime_env.yaml").read_text(encoding="utf-8"))["env_vars"]
    assert "direct_sync" in env["FP8SPEC_RUNTIME_PATCHES"].split(",")  # auto picks direct for FSDP dense
