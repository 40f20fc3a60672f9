"""Check the verl profile's Hydra keys against the config tree shipped in the installed verl wheel.

Only composes configs (hydra-core + the verl wheel installed --no-deps is enough); verl itself is never
imported. Skipped when either is missing, or when the installed verl is not the profiled version.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from fp8spec.profiles import available_versions, load_profile
from tests.conftest import require, skip_missing_extra

hydra = require("hydra")
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402


def _installed_verl() -> tuple[str, Path] | None:
    spec = importlib.util.find_spec("verl")  # locates the package without running verl/__init__.py
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        version = importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None
    return version, Path(list(spec.submodule_search_locations)[0])


_found = _installed_verl()
if _found is None or _found[0] not in available_versions("verl"):
    skip_missing_extra("the profiled verl release is not installed", allow_module_level=True)
VERL_VERSION, VERL_DIR = _found
PROFILE = load_profile("verl", VERL_VERSION)
CONFIG_DIR = VERL_DIR / Path(PROFILE.value("config.dir")).relative_to("verl")


@pytest.fixture(scope="module")
def composer():
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cache: dict[tuple[str, ...], DictConfig] = {}

        def run(*overrides: str) -> DictConfig:
            if overrides not in cache:
                cache[overrides] = compose(PROFILE.value("config.name"), overrides=list(overrides))
            return cache[overrides]

        yield run


def _has_path(cfg: DictConfig, dotted: str) -> bool:
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, DictConfig):
            return False
        try:  # no interpolation resolution; '???' counts as present
            node = node._get_node(part)
        except Exception:  # struct configs raise on unknown keys
            return False
        if node is None:
            return False
    return True


def _fails(composer, override: str) -> bool:
    try:
        composer(override)
    except ConfigCompositionException:
        return True
    return False


def _engine_for(key: str) -> str:
    return "megatron" if ".megatron." in key or "override_optimizer_config" in key else "dp"


def _plus_prefix(key: str) -> str | None:
    for prefix in PROFILE.value("hydra.plus_required_under"):
        if key.startswith(prefix + "."):
            return prefix
    return None


@pytest.mark.parametrize("fact_id", PROFILE.ids("key."))
def test_key_facts_exist_or_need_plus(composer, fact_id):
    key = PROFILE.value(fact_id)
    assert isinstance(key, str) and not key.startswith("+"), f"{fact_id}: key facts hold a bare Hydra key"
    cfg = composer(f"model_engine={_engine_for(key)}")
    if _has_path(cfg, key):
        return
    prefix = _plus_prefix(key)
    assert prefix, f"{fact_id}: {key} is not in verl {VERL_VERSION}'s config and no '+' rule covers it"
    composer(f"model_engine={_engine_for(key)}", f"+{key}.probe=1")


def test_model_engine_values_match_config_group():
    files = sorted(p.stem for p in (CONFIG_DIR / "model_engine").glob("*.yaml"))
    assert sorted(PROFILE.value("values.model_engine")) == files


def test_removed_keys_are_rejected(composer):
    for entry in PROFILE.value("removed_keys"):
        key = entry["key"]
        engine = "megatron" if ".megatron." in key else "dp"
        with pytest.raises(ConfigCompositionException):
            composer(f"model_engine={engine}", f"{key}=1")


def test_declared_megatron_override_keys(composer):
    cfg = composer("model_engine=megatron")
    node = OmegaConf.select(cfg, PROFILE.value("key.megatron_transformer_override"))
    assert sorted(node.keys()) == sorted(PROFILE.value("declared.megatron_transformer_override_keys"))


@pytest.mark.parametrize("prefix", sorted(PROFILE.value("hydra.plus_required_under")))
def test_plus_rules(composer, prefix):
    declared = PROFILE.value("hydra.plus_required_under")[prefix]
    engine = f"model_engine={_engine_for(prefix)}"
    cfg = composer(engine)
    node = OmegaConf.select(cfg, prefix) if _has_path(cfg, prefix) else None
    assert sorted(node.keys() if node is not None else []) == sorted(declared), prefix
    new = f"{prefix}.fp8spec_probe_key"
    assert _fails(lambda *o: composer(engine, *o), f"{new}=1"), f"{new} composed without '+'"
    composer(engine, f"+{new}=1")
    composer(engine, f"++{new}=1")
    for child in declared:
        # Hydra's '+' appends only where nothing is set: it fails on a declared child with a value,
        # passes on a declared null; '++' always works.
        has_value = OmegaConf.select(cfg, f"{prefix}.{child}") is not None
        assert _fails(lambda *o: composer(engine, *o), f"+{prefix}.{child}=x") == has_value, child
        composer(engine, f"++{prefix}.{child}=x")


def test_fp8_megatron_overrides_compose(composer):
    t = PROFILE.value("key.megatron_transformer_override")
    o = PROFILE.value("key.megatron_optimizer_override")
    cfg = composer(
        "model_engine=megatron",
        f"+{t}.fp8=hybrid",
        f"+{t}.fp8_recipe=blockwise",
        f"+{o}.fp8_recipe=blockwise",
    )
    assert OmegaConf.select(cfg, f"{t}.fp8") == "hybrid"
    assert OmegaConf.select(cfg, f"{o}.fp8_recipe") == "blockwise"
    # the reference policy inherits the actor's transformer overrides (rule.ref_megatron_inherits_actor)
    ref_overrides = cfg.actor_rollout_ref.ref.megatron.override_transformer_config
    resolved = OmegaConf.to_container(ref_overrides, resolve=True)
    assert resolved["fp8"] == "hybrid"


def test_env_vars_reach_ray_init(composer):
    key = PROFILE.value("key.ray_runtime_env_env_vars")
    cfg = composer(f"+{key}.NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1")
    assert OmegaConf.select(cfg, f"{key}.NVTE_FP8_BLOCK_SCALING_FP32_SCALES") in (1, "1")


def test_lo_hi_threshold_needs_quotes(composer):
    key = PROFILE.value("key.rollout_is_threshold")
    assert PROFILE.value("hydra.quote_lo_hi_threshold") is True
    assert OmegaConf.select(composer(f"{key}=0.5_2"), key) == 0.52  # the trap the fact warns about
    assert OmegaConf.select(composer(f"{key}='0.5_2'"), key) == "0.5_2"
