"""Every trainer bundle composes in real verl 0.9.1 (its shipped Hydra config tree) and passes verl's own
config validation and dataclass conversion on CPU. A key verl lacks, or a missing '+', fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.compiler.golden import cases, compile_files

pytest.importorskip("hydra")
if importlib.util.find_spec("verl") is None:
    pytest.skip("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)

VERL_CONFIG = Path(importlib.util.find_spec("verl").submodule_search_locations[0]) / "trainer" / "config"
TRAINER_CASES = [c for c in cases() if "+" in c[1]]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def overrides_of(files: dict[str, str]) -> list[str]:
    from ruamel.yaml import YAML

    return list(YAML(typ="safe").load(files["overrides.yaml"]))


@pytest.mark.parametrize("spec_path,backend", TRAINER_CASES, ids=lambda v: getattr(v, "stem", v))
def test_bundle_composes_in_verl(spec_path, backend):
    from fp8spec.spec.loader import load_spec

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
        assert tc.fp8 == spec.training.fp8_recipe and tc.fp8_recipe == spec.training.fp8_scaling
        assert cfg.actor_rollout_ref.actor.optim.override_optimizer_config.fp8_recipe == spec.training.fp8_scaling
        assert cfg.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == spec.training.parallel.tp
    if spec.kv_cache.dtype != "bf16":
        assert rollout.engine_kwargs[spec.rollout.engine].kv_cache_dtype == spec.kv_cache.dtype


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
    pytest.importorskip("ray")
    pytest.importorskip("tensordict")
    from omegaconf import OmegaConf

    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    cfg = compose(overrides_of(compile_files(spec_path, backend)))
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    rollout = omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    assert rollout.quantization == "fp8"
    correction = omega_conf_to_dataclass(resolved.algorithm.rollout_correction, RolloutCorrectionConfig)
    assert correction.rollout_is == "token"


@pytest.mark.parametrize("spec_path,backend", TRAINER_CASES, ids=lambda v: getattr(v, "stem", v))
def test_kuberay_extra_overrides_compose_in_verl(spec_path, backend):
    """The spec's cluster.kuberay.extra_overrides are appended to launch.sh in the RayJob entrypoint: with the
    bundle's own overrides they compose in verl's tree and win."""
    from omegaconf import OmegaConf

    from fp8spec.spec.loader import load_spec

    extra = list(load_spec(spec_path).spec.cluster.kuberay.extra_overrides)
    cfg = compose(overrides_of(compile_files(spec_path, backend)) + extra)
    for override in extra:
        key, _, value = override.lstrip("+").partition("=")
        assert str(OmegaConf.select(cfg, key)) == value
