"""Every trainer bundle composes in real verl 0.9.1 (its shipped Hydra config tree) and passes verl's own
config validation and dataclass conversion on CPU. A key verl lacks, or a missing '+', fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.compiler.golden import cases, compile_files
from tests.compiler.verl_config import compose
from tests.conftest import require, skip_missing_extra

require("hydra")
if importlib.util.find_spec("verl") is None:
    skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)

TRAINER_CASES = [c for c in cases() if "+" in c[1]]


def overrides_of(files: dict[str, str]) -> list[str]:
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load(files["overrides.yaml"]))


@pytest.mark.parametrize("spec_path,backend", TRAINER_CASES, ids=lambda v: getattr(v, "stem", v))
def test_bundle_composes_in_verl(spec_path, backend):
    from fp8spec.specfile.loader import load_spec

    spec = load_spec(spec_path).spec
    files = compile_files(spec_path, backend)
    # the command line launch.sh runs by hand on a Ray head (outside a job): overrides.yaml lists it all
    # but the py_modules entry, whose value is the bundle's absolute path at run time
    from tests.conformance.checks import launch_ray_init

    py_modules = [w.replace("$here", "/bundle") for w in launch_ray_init(files["launch.sh"])
                  if "runtime_env.py_modules=" in w]
    cfg = compose(overrides_of(files) + py_modules)
    assert list(cfg.ray_kwargs.ray_init.runtime_env.get("py_modules") or []) == (
        ["/bundle/lib/fp8spec"] if "lib/fp8spec/__init__.py" in files else [])
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == spec.rollout.engine
    assert rollout.quantization == ("fp8" if spec.linear.quantize else None)
    assert rollout.calculate_log_probs is True
    assert rollout.tensor_model_parallel_size == spec.rollout.tp
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == spec.correction.clip
    assert cfg.trainer.nnodes == spec.hardware.nodes
    env = dict(cfg.ray_kwargs.ray_init.runtime_env.get("env_vars", {}))
    from ruamel.yaml import YAML

    assert env == dict(YAML(typ="safe").load(files["runtime_env.yaml"])["env_vars"])
    if spec.training.backend == "megatron":
        assert cfg.actor_rollout_ref.actor.strategy == "megatron"
        tc = cfg.actor_rollout_ref.actor.megatron.override_transformer_config
        if spec.training.precision == "fp8":
            assert tc.fp8 == spec.training.fp8_recipe and tc.fp8_recipe == spec.training.fp8_scaling
            assert cfg.actor_rollout_ref.actor.optim.override_optimizer_config.fp8_recipe == spec.training.fp8_scaling
        else:
            assert "fp8" not in tc and "fp8_recipe" not in cfg.actor_rollout_ref.actor.optim.override_optimizer_config
        assert cfg.actor_rollout_ref.actor.megatron.vanilla_mbridge is (spec.training.bridge == "mbridge")
        if spec.training.attention in ("fused", "unfused"):
            assert tc.attention_backend == spec.training.attention
        assert cfg.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == spec.training.parallel.tp
    if spec.kv_cache.dtype != "bf16":
        assert rollout.engine_kwargs[spec.rollout.engine].kv_cache_dtype == spec.kv_cache.dtype
    assert_run_keys(cfg, spec)


def assert_run_keys(cfg, spec) -> None:
    """The spec's trainer, reward and batching sections, as verl's composed tree holds them."""
    t, trainer = spec.trainer, cfg.trainer
    assert trainer.default_local_dir == t.checkpoint_dir and t.checkpoint_dir.startswith("/")
    assert trainer.save_freq == t.save_freq > 0 and trainer.test_freq == t.test_freq > 0
    assert trainer.max_actor_ckpt_to_keep == t.keep_checkpoints and trainer.resume_mode == t.resume
    assert list(trainer.logger) == list(t.loggers) and trainer.project_name == t.project
    assert trainer.experiment_name == (t.experiment or spec.name)
    assert cfg.data.val_files == spec.data.val_files
    r = spec.reward
    assert cfg.reward.reward_manager.name == r.manager
    if r.overlong_buffer is not None:
        kwargs = cfg.reward.reward_kwargs
        overlong = kwargs.overlong_buffer_cfg
        assert overlong.enable is True and overlong.len == r.overlong_buffer
        assert overlong.penalty_factor == r.overlong_penalty and overlong.log is False
        assert kwargs.max_resp_len == spec.rollout.max_response_length
    a, actor = spec.algorithm, cfg.actor_rollout_ref.actor
    assert actor.use_dynamic_bsz == a.use_dynamic_bsz
    if a.use_dynamic_bsz:
        sequence = spec.rollout.max_prompt_length + spec.rollout.max_response_length
        assert actor.ppo_max_token_len_per_gpu >= sequence
        assert cfg.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu >= sequence
        assert cfg.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu >= sequence
        assert cfg.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz is True
    if spec.training.backend == "megatron":
        megatron = actor.megatron
        assert megatron.expert_tensor_parallel_size == (spec.training.parallel.etp or 1)
        assert megatron.router_replay.mode == spec.training.router_replay


def test_missing_plus_or_unknown_key_fails():
    """The check has teeth: verl's tree rejects an undeclared key without '+', and a removed key."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose(["actor_rollout_ref.actor.megatron.override_transformer_config.fp8='hybrid'", "model_engine=megatron"])
    with pytest.raises(ConfigCompositionException):
        compose(["actor_rollout_ref.actor.tis_imp_ratio_cap=2.0"])


@pytest.mark.parametrize("spec_path,backend", TRAINER_CASES, ids=lambda v: getattr(v, "stem", v))
def test_bundle_passes_verl_validation(spec_path, backend):
    """verl's own validate_config and config dataclasses (RolloutConfig, RolloutCorrectionConfig) on CPU."""
    require("ray")
    require("tensordict")
    from omegaconf import OmegaConf
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    cfg = compose(overrides_of(compile_files(spec_path, backend)))
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    rollout = omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    from fp8spec.specfile.loader import load_spec

    # the BF16 twin of the one-H200 run turns FP8 linears off: no quantization, verl's default
    assert rollout.quantization == ("fp8" if load_spec(spec_path).spec.linear.quantize else None)
    correction = omega_conf_to_dataclass(resolved.algorithm.rollout_correction, RolloutCorrectionConfig)
    assert correction.rollout_is == "token"


REWARD_OK = str(Path(__file__).resolve().parents[1] / "rules" / "data" / "reward_ok.py")
# name -> (example spec, patch): spec features the examples leave at their defaults
VARIANTS = {
    "router-replay-r3": ("qwen3-30b", {"training": {"router_replay": "R3"}}),
    "router-replay-r2": ("qwen3-30b", {"training": {"router_replay": "R2"}}),
    # the 28-layer stage keeps more beside the engine: the plan's share for it
    "uneven-stages": ("qwen3-30b", {"training": {"parallel": {"pp": 2, "first_stage_layers": 20,
                                                             "last_stage_layers": 28}},
                                    "rollout": {"gpu_memory_utilization": 0.34}}),
    "resume-path": ("qwen3-8b", {"trainer": {"resume": "resume_path", "keep_checkpoints": None, "total_steps": 200,
                                             "resume_from": "/shared/checkpoints/qwen3-8b-fp8-rollout/global_step_40",
                                             "experiment": "resumed", "loggers": ["console", "tensorboard"]}}),
    "fixed-batches": ("qwen3-8b", {"algorithm": {"use_dynamic_bsz": False, "log_prob_micro_batch_size_per_gpu": 2}}),
    "budgets": ("qwen3-8b", {"algorithm": {"ppo_max_token_len_per_gpu": 24576,
                                           "log_prob_max_token_len_per_gpu": 49152}}),
    "custom-reward": ("qwen3-8b-sglang", {"reward": {"custom_function": {"path": REWARD_OK}}}),
    "length-knobs": ("qwen3-8b", {"rollout": {"max_model_len": 22528, "max_num_seqs": 64,
                                              "max_num_batched_tokens": 4096}}),
    "length-knobs-sglang": ("qwen3-8b-sglang", {"rollout": {"max_model_len": 22528, "max_num_seqs": 64,
                                                            "max_num_batched_tokens": 4096}}),
    "sync-bucket": ("qwen3-8b", {"rollout": {"sync_bucket_mb": 8192}}),
    "sync-bucket-megatron": ("qwen3-30b", {"rollout": {"sync_bucket_mb": 4096}}),
}


def _variant(name, tmp_path):
    from tests.conformance.checks import compile_variant
    from tests.conftest import SPECS

    stem, patch = VARIANTS[name]
    backend = next(b for p, b in TRAINER_CASES if p.stem == stem)
    return compile_variant(SPECS / f"{stem}.yaml", backend, patch, tmp_path, label=name)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_composes_and_passes_verl_validation(name, tmp_path):
    require("ray")
    require("tensordict")
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    compiled = _variant(name, tmp_path)
    cfg = compose(compiled.overrides)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert_run_keys(cfg, compiled.spec)
    actor = cfg.actor_rollout_ref.actor
    if name.startswith("router-replay"):
        mode = compiled.spec.training.router_replay
        engine = omega_conf_to_dataclass(_resolved(cfg).actor_rollout_ref.actor.megatron)
        assert engine.router_replay.mode == mode
        assert cfg.actor_rollout_ref.rollout.enable_rollout_routing_replay is (mode == "R3")
    if name == "uneven-stages":
        tc = actor.megatron.override_transformer_config
        assert (tc.num_layers_in_first_pipeline_stage, tc.num_layers_in_last_pipeline_stage) == (20, 28)
    if name == "resume-path":
        assert cfg.trainer.resume_from_path.endswith("global_step_40") and cfg.trainer.total_training_steps == 200
        assert cfg.trainer.max_actor_ckpt_to_keep is None
    if name == "fixed-batches":
        assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 2
        assert actor.ppo_max_token_len_per_gpu == 16384  # verl's default, untouched: dynamic batching is off
    if name == "budgets":
        assert cfg.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu == 49152
    rollout = cfg.actor_rollout_ref.rollout
    if name.startswith("length-knobs"):
        # verl's own RolloutConfig holds what the spec set (its defaults otherwise: null, 256, 8192)
        config = omega_conf_to_dataclass(_resolved(cfg).actor_rollout_ref.rollout)
        assert (config.max_model_len, config.max_num_seqs, config.max_num_batched_tokens) == (22528, 64, 4096)
        # verl passes max_num_batched_tokens to vLLM only; SGLang gets it as its prefill chunk
        assert rollout.engine_kwargs.sglang.get("chunked_prefill_size") == (4096 if name.endswith("sglang") else None)
    else:
        assert (rollout.max_model_len, rollout.max_num_seqs, rollout.max_num_batched_tokens) == (None, 256, 8192)
    # verl's own CheckpointEngineConfig holds the spec's bucket, verl's 2048 MiB where the spec sets none
    bucket = omega_conf_to_dataclass(_resolved(cfg).actor_rollout_ref.rollout.checkpoint_engine)
    assert bucket.update_weights_bucket_megabytes == (compiled.spec.rollout.sync_bucket_mb or 2048)
    assert name.startswith("sync-bucket") == (compiled.spec.rollout.sync_bucket_mb is not None)


def _resolved(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))


def test_custom_reward_ships_in_the_bundle_and_verl_loads_it(tmp_path, monkeypatch):
    """verl's own loader, run from the bundle folder (the Ray working_dir), finds the shipped function."""
    require("ray")
    from ruamel.yaml import YAML
    from verl.utils.import_utils import load_extern_object

    from fp8spec.compiler.writer import write_bundle
    from fp8spec.resolve.reward import BUNDLE_NAME

    compiled = _variant("custom-reward", tmp_path)
    assert compiled.files[BUNDLE_NAME] == Path(REWARD_OK).read_text(encoding="utf-8")
    cfg = compose(compiled.overrides)
    assert cfg.reward.custom_reward_function.path == BUNDLE_NAME
    assert cfg.reward.custom_reward_function.name == "compute_score"
    bundle = write_bundle(tmp_path / "out", compiled.spec.name, compiled.files)
    monkeypatch.chdir(bundle)
    fn = load_extern_object(cfg.reward.custom_reward_function.path, cfg.reward.custom_reward_function.name)
    assert fn("gsm8k", "so the answer is 42", "42") == 1.0
    # the KubeRay ConfigMap (the working_dir there) carries it too
    configmap = next(YAML(typ="safe").load_all(compiled.files["rayjob.yaml"]))
    assert configmap["data"][BUNDLE_NAME] == compiled.files[BUNDLE_NAME]


@pytest.mark.parametrize("spec_path,backend", TRAINER_CASES, ids=lambda v: getattr(v, "stem", v))
def test_kuberay_extra_overrides_compose_in_verl(spec_path, backend):
    """The spec's cluster.kuberay.extra_overrides are appended to launch.sh in the RayJob entrypoint: with the
    bundle's own overrides they compose in verl's tree and win."""
    from omegaconf import OmegaConf

    from fp8spec.specfile.loader import load_spec

    extra = list(load_spec(spec_path).spec.cluster.kuberay.extra_overrides)
    cfg = compose(overrides_of(compile_files(spec_path, backend)) + extra)
    for override in extra:
        key, _, value = override.lstrip("+").partition("=")
        assert str(OmegaConf.select(cfg, key)) == value
