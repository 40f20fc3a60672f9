"""replay_poll: verl 0.9.1's own sync replay buffer, before and after the patch.

The buffer is verl's class from the installed wheel (``verl/trainer/ppo/v1/replay_buffer.py``), built with the
arguments verl's trainer passes; its own ``_wait_for_next_poll`` runs, with only ``time.sleep`` recorded. The
last test activates the patch the way a bundle does (the Ray runtime env's variables) in a fresh interpreter.
What runs on the H200 only: the whole sync ``sample`` loop against the TransferQueue of a real run.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import subprocess
import sys

import pytest

from fp8spec.profiles import load_profile
from fp8spec.report.names import names
from fp8spec.runtime import envs
from fp8spec.runtime.trainer.replay_poll import patch_replay_buffer
from tests.conftest import require

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# what verl 0.9.1's _build_replay_buffer passes for a sync trainer without group filtering
ARGS = {
    "trainer_mode": "sync", "trainer_config": {}, "max_off_policy_threshold": None, "max_off_policy_strategy": "drop",
    "sampler_kwargs": {}, "refill_fn": None, "filter_groups_metric": None, "sync_refill_failed_groups": False,
    "train_batch_size": 16, "gen_batch_size": 16, "max_inflight_gen_batches": 1,
}


@pytest.fixture
def replay_buffer(monkeypatch):
    require("transfer_queue")
    require("verl")
    monkeypatch.delenv(envs.REPLAY_POLL_S.name, raising=False)
    module = importlib.import_module("verl.trainer.ppo.v1.replay_buffer")
    yield importlib.reload(module)  # fresh, unpatched
    importlib.reload(module)  # and unpatched again for whatever imports it next in this process


def test_verl_polls_every_two_seconds_and_its_trainer_never_says_otherwise(replay_buffer):
    fact = load_profile("verl", "0.9.1").value("loop.sync_sample_poll")
    default = inspect.signature(replay_buffer.ReplayBuffer.__init__).parameters["poll_interval"].default
    assert default == fact["poll_interval_s"] == 2.0
    trainer_base = importlib.import_module("verl.trainer.ppo.v1.trainer_base")
    builder = inspect.getsource(trainer_base.PPOTrainer._build_replay_buffer)
    assert "ReplayBuffer" in builder and "poll_interval" not in builder
    assert fact["set_by_trainer"] is False
    assert replay_buffer.ReplayBuffer(**ARGS).poll_interval == 2.0


def test_patch_lowers_the_sync_buffers_poll_and_its_wait_sleeps_that(replay_buffer, monkeypatch, caplog):
    slept: list[float] = []
    monkeypatch.setattr(replay_buffer.time, "sleep", slept.append)
    assert patch_replay_buffer(replay_buffer) is True
    with caplog.at_level(logging.INFO, logger="fp8spec.runtime.trainer.replay_poll"):
        buffer = replay_buffer.ReplayBuffer(**ARGS)
    assert buffer.poll_interval == 0.1
    buffer._wait_for_next_poll("train", last_debug_time=1e18)  # verl's own wait between looks
    assert slept == [0.1]
    line = caplog.records[-1].getMessage()
    pattern = next(p for p in names().lines if p.proves == "replay_poll")
    match = pattern.regex.search(line)
    assert match and float(match["poll_s"]) == 0.1, line
    assert patch_replay_buffer(replay_buffer) is False  # already wrapped


def test_patch_leaves_async_buffers_and_a_given_interval_alone(replay_buffer):
    patch_replay_buffer(replay_buffer)
    async_args = {**ARGS, "trainer_mode": "colocate_async"}
    assert replay_buffer.ReplayBufferAsync(**async_args).poll_interval == 2.0
    assert replay_buffer.ReplayBuffer(**{**ARGS, "poll_interval": 3.0}).poll_interval == 3.0
    assert replay_buffer.ReplayBuffer(**{**ARGS, "poll_interval": 0.05}).poll_interval == 0.05


def test_the_interval_comes_from_the_environment(replay_buffer, monkeypatch):
    monkeypatch.setenv(envs.REPLAY_POLL_S.name, "0.5")
    patch_replay_buffer(replay_buffer)
    assert replay_buffer.ReplayBuffer(**ARGS).poll_interval == 0.5


@pytest.mark.parametrize("bad", ["0", "-1", "fast"])
def test_a_malformed_interval_names_the_variable(replay_buffer, monkeypatch, bad):
    monkeypatch.setenv(envs.REPLAY_POLL_S.name, bad)
    with pytest.raises(ValueError, match=rf"^FP8SPEC_REPLAY_POLL_S must be a positive number of seconds, got '{bad}'"):
        patch_replay_buffer(replay_buffer)


def test_a_bundles_runtime_env_patches_verls_buffer_on_import():
    require("transfer_queue")
    require("verl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8SPEC_")}
    # the two variables every bundle's runtime_env.yaml sets (fp8spec/runtime/manifest.py)
    env.update(FP8SPEC_RUNTIME_PATCHES="replay_poll", VERL_USE_EXTERNAL_MODULES="fp8spec.runtime")
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    code = (
        "import json; from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer; "
        f"print(json.dumps(ReplayBuffer(**{ARGS!r}).poll_interval))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == 0.1
    assert "fp8spec replay_poll: verl's sync replay buffer looks for finished rollouts every 0.1 s" in out.stderr


def test_every_verl_bundle_activates_it_while_verl_leaves_the_poll_at_two_seconds(validate, monkeypatch):
    from fp8spec.compiler.adapters.runtime import needed_patches
    from tests.conftest import BASE_SPEC

    ctx = validate(BASE_SPEC).context
    assert needed_patches(ctx)["replay_poll"] == "trainer"
    fact = ctx.fact
    for later in ({"poll_interval_s": 2.0, "set_by_trainer": True}, {"poll_interval_s": 0.05, "set_by_trainer": False}):
        monkeypatch.setattr(ctx, "fact", lambda kind, fid, default=None, _v=later: _v if fid == "loop.sync_sample_poll"
                            else fact(kind, fid, default))
        assert "replay_poll" not in needed_patches(ctx)  # a verl that sets it, or polls fast enough, needs no patch
