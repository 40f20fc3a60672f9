"""Every example trainer bundle, launched for real on CPU: the bundle's own submit.sh against a real loopback
Ray head, its preflight job (--skip-gpu-checks), then its real launch.sh running verl 0.9.1's real
`python3 -m verl.trainer.main_ppo` with the bundle's overrides, as far as verl goes without GPUs.

What must hold, in order (a regression anywhere earlier fails the test):
- the preflight job passes on the node: the FP8 env vars, the runtime patch set (imported from the bundle's
  lib/ through the job's py_modules), the model folder's config.json and the data files;
- launch.sh runs inside the Ray job: verl's config checks pass, ``ray.init`` accepts the runtime env (no key
  set twice), the TaskRunner starts, builds the tokenizer and the dataloaders, and stops at verl's GPU check,
  ``ValueError: Total available GPUs 0 is less than total desired GPUs N`` in
  ``verl/single_controller/ray/base.py`` ``_check_resource_available``;
- inside the TaskRunner (a Ray worker of the training job) every FP8 env var equals the spec's, and
  ``fp8spec.runtime`` was imported by verl (VERL_USE_EXTERNAL_MODULES) from the shipped copy with the bundle's
  patches active. A probe module reads them there: it is named by the documented extra-override argument
  (``actor_rollout_ref.model.external_lib``, imported by verl's HFModelConfig) and sits beside the bundle's
  files in the uploaded working_dir; no bundle file is changed (checked against manifest.json).

The spec is the example with model.path and the data files pointed at files made in the test's tmp folder
(the model's real config.json, a small tokenizer, small parquet files); every other override is the
example's. The CPU machine cannot install vLLM / SGLang / TransformerEngine (and has megatron-core 0.16.1 for
the CPU checks): the bundle copy gets their .dist-info metadata at the pinned versions, so the preflight's
version rows pass; nothing imports those packages before the GPU request (the pins themselves are checked
in test_ray_preflight.py, and on a real H200 in docs/preflight-h200.md).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import EXAMPLE_SPECS, require
from tests.launchers.conftest import compile_bundle
from tests.launchers.launch_assets import write_model, write_parquet
from tests.launchers.test_ray_preflight import plant_distribution, result_of, rows_by_check

require("verl")
require("transfer_queue", reason="verl 0.9.1's TaskRunner imports TransferQueue (test extra)")
pytestmark = pytest.mark.slow

# Where verl 0.9.1 stops on a cluster without GPUs: after the tokenizer and the dataloaders, before any worker
# group is created (verl/trainer/ppo/v1/trainer_base.py _setup -> ResourcePoolManager.create_resource_pool).
GPU_STOP_FRAME = 'verl/single_controller/ray/base.py", line 240, in _check_resource_available'
SETUP_FRAME = 'verl/trainer/ppo/v1/trainer_base.py", line 231, in _setup'
PROBE_MODULE = "fp8spec_launch_probe"
PROBE = '''"""Test probe: imported by verl's HFModelConfig (external_lib); records what this process sees."""
import json, os, sys

def _reward():
    """The bundle's reward file, opened as verl opens reward.custom_reward_function.path (relative: cwd)."""
    if not os.path.exists("custom_reward.py"):
        return None
    from verl.utils.import_utils import load_extern_object
    score = load_extern_object(module_path="custom_reward.py", object_name="compute_score")
    return score(data_source="openai/gsm8k", solution_str="so #### 7", ground_truth="7")

def _record():
    import ray
    rt = sys.modules.get("fp8spec.runtime")
    record = {{
        "pid": os.getpid(),
        "actor_id": ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None,
        "env": {{name: os.environ.get(name) for name in {names!r}}},
        "runtime_file": getattr(rt, "__file__", None),
        "active_patches": sorted(rt.active_patches()) if rt is not None else None,
        "cwd": os.getcwd(),
        "reward": _reward(),
    }}
    with open({out!r}, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\\n")

_record()
'''


def trainer_examples() -> list[Path]:
    from fp8spec.specfile.loader import load_spec

    return [p for p in EXAMPLE_SPECS if load_spec(p).spec.training.backend]


def launchable_bundle(example: Path, root: Path) -> tuple[Path, dict]:
    """The example compiled with model.path and data files made under ``root``; returns (bundle, spec data)."""
    from fp8spec.catalog._store import load_entry

    yaml = YAML(typ="safe")
    data = yaml.load(example.read_text(encoding="utf-8"))
    config_path = data["model"].get("config_path")
    if config_path:  # a local model: its config.json beside the spec; the copied spec must still find it
        config_file = example.parent / config_path
        data["model"]["config_path"] = str(config_file)
        config = json.loads(config_file.read_text(encoding="utf-8"))
    else:
        config = load_entry(data["model"]["name"])["config"]
    model = write_model(root / "model", config)
    data["model"]["path"] = str(model)
    reward = (data.get("reward") or {}).get("custom_function")
    if reward:  # relative to the example spec; the copied spec must still find it
        reward["path"] = str(example.parent / reward["path"])
    data["data"] = {"train_files": str(write_parquet(root / "data" / "train.parquet")),
                    "val_files": str(write_parquet(root / "data" / "val.parquet", rows=8))}
    kuberay = (data.get("cluster") or {}).get("kuberay")
    if (data.get("cluster") or {}).get("launcher") == "kuberay" and kuberay is not None:
        # the pods would mount the folder the local model and data now live in (CLU002/CLU003)
        kuberay.setdefault("volumes", []).append({"name": "local", "mount_path": str(root), "host_path": str(root)})
    spec = root / example.name
    with open(spec, "w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    return compile_bundle(spec, root / "out"), data


def only_paths_differ(bundle: Path, example: Path, data: dict, tmp_path: Path) -> None:
    """The launchable bundle runs the example's overrides, but for model.path and the data files."""
    original = compile_bundle(example, tmp_path / "example")
    yaml = YAML(typ="safe")
    ours = yaml.load((bundle / "overrides.yaml").read_text())
    theirs = yaml.load((original / "overrides.yaml").read_text())
    paths = {data["model"]["path"], data["data"]["train_files"], data["data"]["val_files"]}
    differ = [(a, b) for a, b in zip(ours, theirs) if a != b]
    assert len(ours) == len(theirs) and all(any(p in a for p in paths) for a, _ in differ), differ
    assert yaml.load((bundle / "runtime_env.yaml").read_text()) == yaml.load((original / "runtime_env.yaml").read_text())


def plant_pins(bundle: Path) -> list[str]:
    """.dist-info metadata for each pinned package this machine lacks at the pinned version."""
    planted = []
    for pkg in json.loads((bundle / "preflight.json").read_text())["packages"]:
        version = pkg["version"].removeprefix(">=")  # a minimum (flash-attn): plant exactly that
        try:
            if metadata.version(pkg["distributions"][0]).split("+")[0] == version:
                continue
        except metadata.PackageNotFoundError:
            pass
        plant_distribution(bundle, pkg["distributions"][0].replace("-", "_"), version)
        planted.append(pkg["name"])
    return planted


def write_probe(folder: Path, env_names: list[str], out: Path) -> None:
    (folder / f"{PROBE_MODULE}.py").write_text(PROBE.format(names=sorted(env_names), out=str(out)),
                                               encoding="utf-8")


def unchanged(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name, sha in manifest["files"].items():
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == sha, name


def probe_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def assert_stopped_at_the_gpu_request(output: str, expected: dict) -> None:
    gpus = expected["hardware"]["nodes"] * expected["hardware"]["gpus_per_node"]
    assert "[validate_config] All configuration checks passed successfully!" in output
    assert "ray init kwargs:" in output and "Failed to merge the Job's runtime env" not in output
    assert "Connected to Ray cluster" in output
    assert "train and validate dataloader initialized, train dataset size: 64, val dataset size: 8" in output
    assert SETUP_FRAME in output and GPU_STOP_FRAME in output
    assert f"ValueError: Total available GPUs 0 is less than total desired GPUs {gpus}" in output
    # nothing failed before the GPU check: the only exception raised is that ValueError
    raised = set(re.findall(r"^([\w.]+(?:Error|Exception)(?:\(\w+\))?): ", output, flags=re.MULTILINE))
    assert raised == {"ValueError", "ray.exceptions.RayTaskError(ValueError)"}, raised


def job_statuses(head) -> dict[str, str]:
    from ray.job_submission import JobSubmissionClient

    return {j.submission_id: str(j.status.value) for j in JobSubmissionClient(head.dashboard).list_jobs()}


@pytest.mark.parametrize("example", trainer_examples(), ids=lambda p: p.stem)
def test_example_bundle_launches_through_ray_job(example, ray_head, tmp_path):
    bundle, data = launchable_bundle(example, tmp_path)
    only_paths_differ(bundle, example, data, tmp_path)
    expected = json.loads((bundle / "preflight.json").read_text())
    unchanged(bundle)
    plant_pins(bundle)
    probe_out = tmp_path / "probe.jsonl"
    write_probe(bundle, list(expected["env"]), probe_out)

    proc = subprocess.run(
        ["bash", str(bundle / "submit.sh"), "--address", ray_head.dashboard, "--skip-gpu-checks", "--wait",
         "--id-suffix", "launch", "--", f"actor_rollout_ref.model.external_lib={PROBE_MODULE}"],
        env=ray_head.env, capture_output=True, text=True, timeout=540)
    output = proc.stdout + proc.stderr

    # 1. the preflight job passed on the node, on the shipped patch set, the model folder and the data
    result = result_of(proc)
    assert result["ok"] is True, output[-4000:]
    rows = rows_by_check(result)
    for name, value in expected["env"].items():
        assert rows[f"env {name}"]["found"] == value and rows[f"env {name}"]["status"] == "PASS"
    assert rows["model config.json"]["status"] == "PASS"
    for path in expected["data"]["files"]:
        assert rows[f"data {path}"]["status"] == "PASS"
    if expected["runtime"]:
        runtime = rows["runtime fp8spec.runtime"]
        assert runtime["status"] == "PASS" and "/runtime_resources/py_modules_files/" in runtime["found"]
    else:
        assert "runtime fp8spec.runtime" not in rows

    # 2. the training job ran launch.sh -> verl main_ppo and stopped exactly at the GPU request
    assert proc.returncode != 0
    assert_stopped_at_the_gpu_request(output, expected)
    # every verl bundle activates replay_poll, and verl's trainer builds its replay buffer before it asks Ray for
    # GPUs: the patch ran on verl's own class in the TaskRunner
    assert "replay_poll" in expected["runtime"]["patches"]
    assert "fp8spec replay_poll: verl's sync replay buffer looks for finished rollouts every 0.1 s" in output
    ids = job_statuses(ray_head)
    base = expected["submission_id"] + "-launch"
    assert ids[base + "-preflight"] == "SUCCEEDED" and ids[base] == "FAILED"

    # 3. read back inside the TaskRunner (a Ray worker of the training job)
    (record,) = [r for r in probe_records(probe_out) if r["actor_id"]]
    assert record["env"] == expected["env"]
    if expected["runtime"]:
        assert "/runtime_resources/py_modules_files/" in record["runtime_file"]
        assert record["active_patches"] == expected["runtime"]["patches"]
    else:
        assert record["runtime_file"] is None
    # the job's working_dir is the bundle: verl finds a shipped reward file from the worker's cwd
    assert "/runtime_resources/working_dir_files/" in record["cwd"]
    assert record["reward"] == (1.0 if (data.get("reward") or {}).get("custom_function") else None)
    unchanged(bundle)


def test_launch_sh_by_hand_on_a_ray_head(ray_head, tmp_path):
    """launch.sh run by hand (outside any Ray job, RAY_ADDRESS pointing at the head), as the H200 RL run runs
    it: verl's own ray.init carries the env vars, the patch set (py_modules) and the bundle as working_dir, so
    the workers find the shipped reward file where a Ray job would put it (the fifth H200 attempt would have
    stopped there: the worker's cwd was not the bundle)."""
    (example,) = [p for p in trainer_examples() if p.stem == "tiny-qwen3-h200"]
    bundle, data = launchable_bundle(example, tmp_path)
    expected = json.loads((bundle / "preflight.json").read_text())
    assert expected["env"] and expected["runtime"] and (bundle / "custom_reward.py").is_file()
    probe_out = tmp_path / "probe.jsonl"
    write_probe(bundle, list(expected["env"]), probe_out)  # beside the bundle's files, in its working_dir
    env = {k: v for k, v in ray_head.env.items() if k not in expected["env"]}
    env["RAY_ADDRESS"] = ray_head.gcs
    proc = subprocess.run(
        ["bash", str(bundle / "launch.sh"), f"actor_rollout_ref.model.external_lib={PROBE_MODULE}"],
        env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    init = next(line for line in output.splitlines() if line.startswith("ray init kwargs:"))
    for name, value in expected["env"].items():
        assert f"'{name}': '{value}'" in init
    assert f"'py_modules': ['{bundle / 'lib' / 'fp8spec'}']" in init
    assert f"'working_dir': '{bundle}'" in init
    assert_stopped_at_the_gpu_request(output, expected)
    (record,) = [r for r in probe_records(probe_out) if r["actor_id"]]
    assert record["env"] == expected["env"]
    assert "/runtime_resources/py_modules_files/" in record["runtime_file"]
    assert record["active_patches"] == expected["runtime"]["patches"]
    assert "/runtime_resources/working_dir_files/" in record["cwd"] and record["reward"] == 1.0
    unchanged(bundle)


def test_launch_sh_refuses_a_job_without_the_bundle_env(ray_head, bundle_8b, bundle_copy):
    """Submitted as a Ray job without runtime_env.yaml, launch.sh names the variable and stops before verl."""
    bundle = bundle_copy(bundle_8b)
    proc = subprocess.run(["ray", "job", "submit", "--address", ray_head.dashboard, "--working-dir", str(bundle),
                           "--", "bash", "launch.sh"], env=ray_head.env, capture_output=True, text=True,
                          timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ("launch.sh: the Ray job sets FP8SPEC_RUNTIME_PATCHES='(unset)', this bundle needs "
            "fast_block_quant,kv_scales,replay_poll: submit it "
            "with --runtime-env runtime_env.yaml (bash submit.sh does)") in output
    assert "verl.trainer.main_ppo" not in output and "validate_config" not in output
    shutil.rmtree(bundle)
