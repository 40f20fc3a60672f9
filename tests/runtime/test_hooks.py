"""The hook table (fp8spec/runtime/hooks.py): what each hook wraps, in which process, in which order."""

import importlib
import re
from pathlib import Path

import pytest

from fp8spec.runtime import hooks, manifest, targets
from fp8spec.runtime.hooks import HOOKS, RUNS_IN

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.installer.rsplit(".", 2)[-2])
def test_every_installer_resolves_to_a_function(hook):
    path, name = hook.installer.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(path), name))


def test_every_target_is_a_declared_hook_point_and_its_orders_count_from_one():
    declared = {v for k, v in vars(targets).items() if k.startswith("MOD_")}
    by_target: dict = {}
    for h in HOOKS:
        assert h.target in declared, h
        by_target.setdefault(h.target, []).append(h.order)
    for target, orders in by_target.items():
        assert sorted(orders) == list(range(1, len(orders) + 1)), target


def test_each_hook_acts_in_the_process_where_verl_runs_what_it_wraps():
    for h in HOOKS:
        assert h.process in hooks.PROCESSES, h
        owners = {RUNS_IN[w] if w in RUNS_IN else RUNS_IN[w.rsplit(".", 1)[0]] for w in h.wraps}
        assert owners == {h.process}, h


def test_patch_names_and_version_checks_are_the_manifests():
    named = {p for h in HOOKS for p in h.patches}
    assert named == set(manifest.PATCHES)  # every patch installs something; no hook of an unknown patch
    assert {d for h in HOOKS for d in h.requires} <= set(manifest.KNOWN_VERSIONS)


def test_an_order_constraint_says_why():
    for h in HOOKS:
        shared = [o for o in HOOKS if o is not h and set(o.wraps) & set(h.wraps)]
        if shared and h.order > 1:
            assert h.why_order, h


@pytest.mark.parametrize(
    ("method", "chain"),
    [
        ("BucketedWeightSender.async_send_weights", ["fused_send", "sync_timing"]),
        ("BucketedWeightReceiver.receive_weights", ["lazy_receive", "flat_receive"]),
        ("vLLMColocateWorkerExtension._update_weights", ["vllm_kv", "direct_sync_hook"]),
        ("vLLMColocateWorkerExtension.update_weights_from_ipc", ["vllm_kv", "direct_sync_hook"]),
        ("ActorRolloutRefWorker.init_model", ["verl_patch", "verl_patch"]),
        ("vllm_quant_utils.quant_weights", ["verl_quant"]),
    ],
)
def test_the_wrapping_chain_around_each_verl_method(method, chain):
    # innermost first; in a compiled bundle the sender is wrapped by fused_send alone (sync_timing is measurement)
    assert [i.rsplit(".", 2)[-2] for i in hooks.wrapping_chain(method)] == chain


def test_no_compiled_bundle_turns_measurement_on():
    values = set()
    for path in GOLDEN.rglob("*"):
        if path.is_file() and path.suffix in (".sh", ".yaml", ".json", ".md"):
            text = path.read_text(encoding="utf-8")
            values |= set(re.findall(r"FP8SPEC_RUNTIME_PATCHES\W{1,4}([a-z_,]+)", text))
    assert values and all("sync_timing" not in v.split(",") for v in values), values
