"""How many logical CPUs verl 0.9.1's main_ppo takes before it asks for GPUs (backends/verl/0.9.1.yaml).

The fact is read back and checked two ways: against the installed verl 0.9.1 and TransferQueue (the actor
options Ray schedules by, and verl's shipped config), and on a real loopback Ray head offering one CPU fewer,
where the tiny example bundle's own launch.sh must stall with a storage unit Ray cannot place (the session head
of the other launch tests offers exactly the fact's number, and there launch.sh reaches verl's GPU check).
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from fp8spec.profiles import load_profile
from tests.conftest import require
from tests.launchers.conftest import start_ray_head
from tests.launchers.test_real_launch import launchable_bundle, trainer_examples

verl = require("verl")
tq = require(
    "transfer_queue", reason="verl 0.9.1's TaskRunner imports TransferQueue (test extra)"
)

PROFILE = load_profile("verl", "0.9.1")
NEED = PROFILE.value("requirement.ray_cpus_before_gpus")


def _num_cpus(actor_class) -> float | None:
    """The num_cpus a @ray.remote class was declared with (None: Ray's default, 1 to schedule and 0 held)."""
    return actor_class._default_options.get("num_cpus")


def test_fact_is_what_the_installed_verl_asks_for():
    from transfer_queue.controller import TransferQueueController
    from transfer_queue.storage.simple_storage import SimpleStorageUnit
    from verl.single_controller.ray.base import ResourcePoolManager
    from verl.trainer.main_ppo import TaskRunnerV1

    shipped = Path(verl.__file__).parent / "trainer" / "config"
    units = set()
    for name in ("_generated_ppo_trainer.yaml", "_generated_ppo_megatron_trainer.yaml"):
        config = YAML(typ="safe").load((shipped / name).read_text(encoding="utf-8"))
        assert config["transfer_queue"]["backend"]["storage_backend"] == "SimpleStorage"
        units.add(config["transfer_queue"]["backend"]["SimpleStorage"]["num_data_storage_units"])
    (storage_units,) = units
    assert _num_cpus(TaskRunnerV1) is None  # holds no CPU once placed
    held = _num_cpus(TransferQueueController) + storage_units * _num_cpus(SimpleStorageUnit)
    assert NEED == held == 9
    assert (
        PROFILE.value("requirement.ray_cpus_per_gpu")
        == ResourcePoolManager.__dataclass_fields__["max_colocate_count"].default
    )


def test_storage_units_are_pinned_round_robin_to_nodes():
    """Hard node affinity, one unit per alive node in turn: a node short of CPUs stalls its units."""
    import inspect

    from transfer_queue.utils import common

    source = inspect.getsource(common.get_node_round_robin_scheduling_strategies)
    assert "soft=False" in source and "i % len(alive_node_ids)" in source
    assert PROFILE.value("requirement.ray_storage_unit_placement") == "round_robin_hard_node_affinity"


def _actors(head) -> list[dict]:
    """The head's actors from Ray's state API (the dashboard `ray list actors` asks), read in this process: a
    `ray list actors` process per poll cost about 2 CPU-seconds on the 2-core machine, as much as the launch."""
    from ray.util.state import list_actors

    try:
        actors = list_actors(address=head.dashboard, limit=100, raise_on_missing_output=False, timeout=30)
    except Exception:  # the dashboard is busy or not up yet: poll again
        return []
    return [dataclasses.asdict(a) for a in actors]


def _cpus(head) -> tuple[float, float]:
    """(total, used) logical CPUs of the cluster, from the GCS (what `ray status` shows as Usage)."""
    from ray.autoscaler.v2.sdk import get_cluster_status

    (cpu,) = [r for r in get_cluster_status(head.gcs).cluster_resource_usage if r.resource_name == "CPU"]
    return cpu.total, cpu.used


@pytest.mark.slow
def test_one_cpu_fewer_stalls_main_ppo_with_an_unplaced_storage_unit(tmp_path):
    (example,) = [p for p in trainer_examples() if p.stem == "tiny-qwen3-h200"]
    bundle, _ = launchable_bundle(example, tmp_path)
    with start_ray_head(NEED - 1) as head:
        # past the bundle's own CPU check (test_ray_cpu_preflight.py): this test shows what verl does without it
        env = dict(head.env, RAY_ADDRESS=head.gcs, FP8SPEC_SKIP_RAY_CPU_CHECK="1")
        out = tmp_path / "launch.out"
        with open(out, "w", encoding="utf-8") as fh:
            proc = subprocess.Popen(
                ["bash", str(bundle / "launch.sh")],
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        try:
            # Worker processes start slowly on a small, busy machine: wait until every storage unit Ray can place
            # is ALIVE and the one left cannot be placed: the head has fewer free CPUs than a unit asks for,
            # every one held by a live actor of this job until the job ends (hard node affinity, one node).
            # Seen on two polls in a row, the stall is then certain, not a start-up moment (no settle window).
            from transfer_queue.storage.simple_storage import SimpleStorageUnit

            unit_cpus = _num_cpus(SimpleStorageUnit)
            deadline, seen, cpus, confirmed = time.time() + 480, None, None, 0
            while time.time() < deadline and proc.poll() is None:
                actors = _actors(head)
                units = [a for a in actors if a.get("class_name") == "SimpleStorageUnit"]
                alive = {a.get("class_name") for a in actors if a.get("state") == "ALIVE"}
                placed = sum(a.get("state") == "ALIVE" for a in units)
                pending = sorted(a["name"] for a in units if a.get("state") == "PENDING_CREATION")
                settled = len(units) == 8 and {"TaskRunnerV1", "TransferQueueController"} <= alive
                state, full = (placed, tuple(pending)), False
                if settled and placed == NEED - 2 and len(pending) == 1:  # 1 CPU went to the controller
                    cpus = _cpus(head)
                    full = cpus == (NEED - 1, NEED - 1) and cpus[0] - cpus[1] < unit_cpus
                confirmed, seen = ((confirmed + 1 if state == seen else 1) if full else 0), state
                if confirmed >= 2:
                    break
                time.sleep(2)
            assert proc.poll() is None, "main_ppo exited instead of waiting:\n" + out.read_text()[-3000:]
            assert seen is not None and seen[0] == NEED - 2, f"storage units ALIVE, pending: {seen}"
            assert len(seen[1]) == 1 and seen[1][0].startswith("TransferQueueStorageUnit#")  # the missing CPU
            assert confirmed >= 2, f"CPUs (total, used): {cpus}"  # no CPU left for it
            assert "Total available GPUs" not in out.read_text()  # never got as far as the GPU request
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
