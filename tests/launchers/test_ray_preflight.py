"""The bundle's preflight through a REAL local Ray cluster, submitted by the bundle's own submit.sh.

CI has no GPU: the head starts with --num-gpus=0, so the dry run (--skip-gpu-checks) must report the GPU
facts of a CPU-only node without judging them, the real run must fail on them, and the planted mismatches
(a wrong env var value in the submitted runtime env, a wrong pin in preflight.json, a missing model folder or
data file, a changed file of the shipped patch set) must stop the job before the training job is submitted.
The training job itself (the real launch.sh into verl) runs in test_real_launch.py.

The bundle is the qwen3-8b example with its model folder and data files made in the tmp folder. The CPU
machine has verl but not vLLM; the bundle copy gets a vllm .dist-info at the pinned version (found on the
worker's sys.path through the uploaded working_dir), so the baseline can pass and a version check can be
seen to work in both directions.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RESULT_TAG = "FP8SPEC_PREFLIGHT_RESULT "


def plant_distribution(folder: Path, name: str, version: str) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")


def submit(head, bundle: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(bundle / "submit.sh"), "--address", head.dashboard, *args],
                          env=head.env, capture_output=True, text=True, timeout=240)


def result_of(proc: subprocess.CompletedProcess) -> dict:
    # Ray prints a failed job's log twice (tailed, then in its status message): the same line each time.
    lines = {line for line in proc.stdout.splitlines() if line.startswith(RESULT_TAG)}
    assert len(lines) == 1, f"no single preflight result in the job output:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines.pop()[len(RESULT_TAG):])


def rows_by_check(result: dict) -> dict[str, dict]:
    (node,) = [n for n in result["nodes"] if n["node"] != "cluster"]
    return {row["check"]: row for row in node["rows"]}


def job_ids(head) -> dict[str, str]:
    from ray.job_submission import JobSubmissionClient

    return {j.submission_id: str(j.status.value) for j in JobSubmissionClient(head.dashboard).list_jobs()}


@pytest.fixture(scope="module")
def launchable(tmp_path_factory):
    from tests.conftest import SPECS
    from tests.launchers.test_real_launch import launchable_bundle

    bundle, _ = launchable_bundle(SPECS / "qwen3-8b.yaml", tmp_path_factory.mktemp("l8b"))
    return bundle


@pytest.fixture
def bundle(launchable, bundle_copy):
    copy = bundle_copy(launchable)
    plant_distribution(copy, "vllm", "0.24.0")
    plant_distribution(copy, "flash_attn", "2.8.3")  # the FSDP model's flash_attention_2 needs it
    return copy


def test_preflight_passes_on_a_cpu_node(ray_head, bundle):
    expected = json.loads((bundle / "preflight.json").read_text())
    proc = submit(ray_head, bundle, "--skip-gpu-checks", "--id-suffix", "pass", "--preflight-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_of(proc)
    assert result["ok"] is True and result["mode"] == "ray, GPU checks skipped"
    rows = rows_by_check(result)
    # the env vars reached the worker with the bundle's values
    for name, value in expected["env"].items():
        assert rows[f"env {name}"] == {"check": f"env {name}", "expected": value, "found": value,
                                        "status": "PASS"}
    assert expected["env"] == {"FP8SPEC_RUNTIME_PATCHES": "fast_block_quant,kv_scales,replay_poll",
                               "VERL_USE_EXTERNAL_MODULES": "fp8spec.runtime", "VLLM_USE_DEEP_GEMM_E8M0": "0"}
    # what a CPU-only node reports: no CUDA device, a CPU build of torch, judged SKIP (not PASS)
    assert rows["gpu"]["status"] == "SKIP" and "no CUDA device" in rows["gpu"]["found"]
    assert rows["gpu count"] == {"check": "gpu count", "expected": "8", "found": "0", "status": "SKIP"}
    assert rows["torch cuda"]["status"] == "SKIP" and rows["torch cuda"]["found"] == "none (CPU build of torch)"
    assert rows["pkg verl"]["status"] == rows["pkg vllm"]["status"] == rows["pkg flash-attn"]["status"] == "PASS"
    assert "pkg fp8spec" not in rows  # nothing of fp8spec is installed on the nodes: the patch set ships
    runtime = rows["runtime fp8spec.runtime"]
    assert runtime["status"] == "PASS" and "/runtime_resources/py_modules_files/" in runtime["found"]
    assert runtime["expected"].startswith(f"sha256 {expected['runtime']['sha256'][:16]} (")
    assert rows["model config.json"]["status"] == "PASS"
    assert [r["status"] for k, r in rows.items() if k.startswith("data ")] == ["PASS", "PASS"]
    assert "PREFLIGHT PASSED" in proc.stdout
    # the table is printed node by node
    assert re.search(r"NODE\s+CHECK\s+EXPECTED\s+FOUND\s+STATUS", proc.stdout)
    assert "--preflight-only, so the training job was not submitted" in proc.stdout
    ids = job_ids(ray_head)
    base = expected["submission_id"] + "-pass"
    assert ids[base + "-preflight"] == "SUCCEEDED" and base not in ids


def test_wrong_env_value_in_runtime_env_fails_and_names_it(ray_head, bundle):
    runtime_env = bundle / "runtime_env.yaml"
    text = runtime_env.read_text()
    assert '"VLLM_USE_DEEP_GEMM_E8M0": "0"' in text
    runtime_env.write_text(text.replace('"VLLM_USE_DEEP_GEMM_E8M0": "0"', '"VLLM_USE_DEEP_GEMM_E8M0": "1"'))
    proc = submit(ray_head, bundle, "--skip-gpu-checks", "--id-suffix", "env")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = rows_by_check(result_of(proc))
    assert rows["env VLLM_USE_DEEP_GEMM_E8M0"] == {"check": "env VLLM_USE_DEEP_GEMM_E8M0", "expected": "0",
                                                    "found": "1", "status": "FAIL"}
    assert rows["env FP8SPEC_RUNTIME_PATCHES"]["status"] == "PASS"
    assert "PREFLIGHT FAILED: 1 mismatch(es)" in proc.stdout
    assert "env VLLM_USE_DEEP_GEMM_E8M0 expected '0', found '1'" in proc.stdout
    assert "training job was NOT submitted" in proc.stderr
    base = json.loads((bundle / "preflight.json").read_text())["submission_id"] + "-env"
    ids = job_ids(ray_head)
    assert ids[base + "-preflight"] == "FAILED" and base not in ids


def test_wrong_pin_in_preflight_json_fails_and_names_it(ray_head, bundle):
    expected = json.loads((bundle / "preflight.json").read_text())
    (verl,) = [p for p in expected["packages"] if p["name"] == "verl"]
    assert verl["version"] == "0.9.1"
    verl["version"] = "0.9.2"
    (bundle / "preflight.json").write_text(json.dumps(expected))
    proc = submit(ray_head, bundle, "--skip-gpu-checks", "--id-suffix", "pin")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = rows_by_check(result_of(proc))
    assert rows["pkg verl"] == {"check": "pkg verl", "expected": "0.9.2", "found": "0.9.1", "status": "FAIL"}
    assert "pkg verl expected '0.9.2', found '0.9.1'" in proc.stdout
    assert all(r["status"] == "PASS" for k, r in rows.items() if k.startswith("env "))
    assert "training job was NOT submitted" in proc.stderr


def test_missing_model_folder_and_data_file_fail(ray_head, bundle):
    """The model folder and every data file are looked for on the node: missing ones fail, by name."""
    expected = json.loads((bundle / "preflight.json").read_text())
    expected["model"]["path"] = str(bundle.parent / "no-model")
    expected["data"]["files"][1] = str(bundle.parent / "no-data" / "val.parquet")
    (bundle / "preflight.json").write_text(json.dumps(expected))
    proc = submit(ray_head, bundle, "--skip-gpu-checks", "--id-suffix", "paths")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = rows_by_check(result_of(proc))
    assert rows["model config.json"]["status"] == "FAIL"
    assert rows["model config.json"]["found"] == f"{bundle.parent / 'no-model'} is not a folder on this node (not mounted?)"
    assert rows[f"data {expected['data']['files'][0]}"]["status"] == "PASS"
    missing = rows[f"data {bundle.parent / 'no-data' / 'val.parquet'}"]
    assert missing["status"] == "FAIL" and missing["found"] == "missing (not mounted?)"
    assert "PREFLIGHT FAILED: 2 mismatch(es)" in proc.stdout
    assert "training job was NOT submitted" in proc.stderr


def test_changed_patch_set_file_fails(ray_head, bundle):
    """The workers import the bundle's lib/ through py_modules: a changed file there is named."""
    target = bundle / "lib" / "fp8spec" / "runtime" / "quantization" / "blockquant.py"
    target.write_text(target.read_text() + "\n# edited on the cluster\n")
    proc = submit(ray_head, bundle, "--skip-gpu-checks", "--id-suffix", "lib")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = rows_by_check(result_of(proc))["runtime fp8spec.runtime"]
    assert row["status"] == "FAIL" and "(differs: fp8spec/runtime/quantization/blockquant.py)" in row["found"]
    assert "training job was NOT submitted" in proc.stderr


def test_gpu_checks_fail_on_a_cpu_only_cluster(ray_head, bundle):
    """Without --skip-gpu-checks the preflight looks for GPU nodes: a CPU-only Ray cluster has none."""
    proc = submit(ray_head, bundle, "--id-suffix", "gpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = result_of(proc)
    assert result["ok"] is False and result["mode"] == "ray"
    (cluster,) = [n for n in result["nodes"] if n["node"] == "cluster"]
    assert cluster["rows"][0] == {"check": "gpu nodes", "expected": "1",
                                  "found": "0 (no alive Ray node has a GPU resource)", "status": "FAIL"}
    assert [r["status"] for r in cluster["rows"][1:]] == ["PASS"]  # the wandb key the example's logger needs
    assert "training job was NOT submitted" in proc.stderr
