"""The verl profile's value lists are verl's own registries: imported from the installed release, not retyped."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from fp8spec.profiles import load_profile
from tests.conftest import require, skip_missing_extra

if importlib.util.find_spec("verl") is None:
    skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)
require("ray")
require("tensordict")
VERSION = importlib.metadata.version("verl")
PROFILE = load_profile("verl", VERSION)


def test_reward_managers_are_verls_registry():
    import verl.experimental.reward_loop.reward_manager  # noqa: F401  (registers the managers)
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    assert sorted(PROFILE.value("values.reward_manager")) == sorted(REWARD_MANAGER)


def test_loggers_are_verls_tracking_backends():
    from verl.utils.tracking import Tracking

    assert PROFILE.value("values.trainer_logger") == list(Tracking.supported_backend)


def test_router_replay_modes_are_the_ones_verl_accepts():
    from verl.workers.config.actor import RouterReplayConfig

    for mode in PROFILE.value("values.router_replay"):
        assert RouterReplayConfig(mode=mode).mode == mode
    with pytest.raises(ValueError):
        RouterReplayConfig(mode="R4")
