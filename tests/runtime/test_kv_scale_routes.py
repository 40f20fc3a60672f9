"""How each rollout engine receives the trainer's KV scales: every engine fp8spec compiles for has a route, and a
rollout name without one is an error before any hook is attached (never vLLM's route by default)."""

from __future__ import annotations

import types

import pytest

from fp8spec.engines import engine_names
from fp8spec.runtime.kv_scales import KV_SCALE_ROUTES, kv_scale_route
from fp8spec.runtime.kv_scales.kv_hooks import attach_kv_calibration


def test_every_engine_has_a_kv_scale_route():
    assert {name: kv_scale_route(name) for name in engine_names()} == {
        name: KV_SCALE_ROUTES[name] for name in engine_names()
    }
    assert set(KV_SCALE_ROUTES.values()) == {"weight_stream", "rollout_update"}


@pytest.mark.parametrize("name", ["trtllm", "", "VLLM", "sglang "])
def test_a_rollout_name_without_a_route_is_an_error(name):
    with pytest.raises(ValueError) as err:
        kv_scale_route(name)
    message = str(err.value)
    assert repr(name) in message
    assert all(known in message for known in KV_SCALE_ROUTES)


class _Untouchable:
    def __getattr__(self, attr):
        raise AssertionError(f"the actor's {attr} was touched before the route was known")


def test_attach_fails_before_hooking_an_engine_without_a_route():
    worker = types.SimpleNamespace(actor=_Untouchable(), config=types.SimpleNamespace(rollout={"name": "trtllm"}))
    with pytest.raises(ValueError, match="'trtllm'"):
        attach_kv_calibration(worker)
    assert not hasattr(worker, "_fp8spec_kv_calibrator")
