"""The bundle's preflight through a REAL local Ray cluster, submitted by the bundle's own submit.sh.

CI has no GPU: the head starts with --num-gpus=0, so the dry run (--skip-gpu-checks) must report the GPU
facts of a CPU-only node without judging them, the real run must fail on them, and the planted mismatches
(a wrong env var value in the submitted runtime env, a wrong pin in preflight.json) must stop the job
before the training job is submitted.

The CPU machine has verl and fp8spec installed but not vLLM; the bundle copies get a stand-in vllm
distribution (a .dist-info folder, which the worker finds on its sys.path through the uploaded working_dir),
so the baseline can pass and a version check can be seen to work in both directions.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

RESULT_TAG = "FP8SPEC_PREFLIGHT_RESULT "


def plant_distribution(folder: Path, name: str, version: str) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")


def stub_launch(folder: Path) -> None:
    """Replace the verl command by a script that shows what the training job would have started with."""
    (folder / "launch.sh").write_text(
        "#!/usr/bin/env bash\nset -eu\necho \"TRAINING-JOB-RAN args=$* VLLM_USE_DEEP_GEMM_E8M0=${VLLM_USE_DEEP_GEMM_E8M0}\"\n",
        encoding="utf-8")


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


def test_preflight_passes_then_training_job_is_submitted(ray_head, bundle_8b, bundle_copy):
    bundle = bundle_copy(bundle_8b)
    plant_distribution(bundle, "vllm", "0.24.0")
    stub_launch(bundle)
    expected = json.loads((bundle / "preflight.json").read_text())
    proc = submit(ray_head, bundle, "--skip-gpu-checks", "--id-suffix", "pass", "--wait", "--", "extra=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_of(proc)
    assert result["ok"] is True and result["mode"] == "ray, GPU checks skipped"
    rows = rows_by_check(result)
    # the env vars reached the worker with the bundle's values
    for name, value in expected["env"].items():
        assert rows[f"env {name}"] == {"check": f"env {name}", "expected": value, "found": value,
                                        "status": "PASS"}
    assert expected["env"] == {"FP8SPEC_RUNTIME_PATCHES": "fast_block_quant,kv_scales", "VERL_USE_EXTERNAL_MODULES": "fp8spec.runtime",
                               "VLLM_USE_DEEP_GEMM_E8M0": "0"}
    # what a CPU-only node reports: no CUDA device, a CPU build of torch, judged SKIP (not PASS)
    assert rows["gpu"]["status"] == "SKIP" and "no CUDA device" in rows["gpu"]["found"]
    assert rows["gpu count"] == {"check": "gpu count", "expected": "8", "found": "0", "status": "SKIP"}
    assert rows["torch cuda"]["status"] == "SKIP" and rows["torch cuda"]["found"] == "none (CPU build of torch)"
    assert rows["pkg verl"]["status"] == rows["pkg vllm"]["status"] == rows["pkg fp8spec"]["status"] == "PASS"
    assert rows["model config.json"]["status"] == "SKIP"  # /models/... does not exist here
    assert "PREFLIGHT PASSED" in proc.stdout
    # the table is printed node by node
    assert re.search(r"NODE\s+CHECK\s+EXPECTED\s+FOUND\s+STATUS", proc.stdout)
    # then the training job ran, with the runtime env and the extra override
    assert "TRAINING-JOB-RAN args=extra=1 VLLM_USE_DEEP_GEMM_E8M0=0" in proc.stdout
    ids = job_ids(ray_head)
    base = expected["submission_id"] + "-pass"
    assert ids[base + "-preflight"] == "SUCCEEDED" and ids[base] == "SUCCEEDED"


def test_wrong_env_value_in_runtime_env_fails_and_names_it(ray_head, bundle_8b, bundle_copy):
    bundle = bundle_copy(bundle_8b)
    plant_distribution(bundle, "vllm", "0.24.0")
    stub_launch(bundle)
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
    assert "TRAINING-JOB-RAN" not in proc.stdout
    base = json.loads((bundle / "preflight.json").read_text())["submission_id"] + "-env"
    ids = job_ids(ray_head)
    assert ids[base + "-preflight"] == "FAILED" and base not in ids


def test_wrong_pin_in_preflight_json_fails_and_names_it(ray_head, bundle_8b, bundle_copy):
    bundle = bundle_copy(bundle_8b)
    plant_distribution(bundle, "vllm", "0.24.0")
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


def test_gpu_checks_fail_on_a_cpu_only_cluster(ray_head, bundle_8b, bundle_copy):
    """Without --skip-gpu-checks the preflight looks for GPU nodes: a CPU-only Ray cluster has none."""
    bundle = bundle_copy(bundle_8b)
    plant_distribution(bundle, "vllm", "0.24.0")
    proc = submit(ray_head, bundle, "--id-suffix", "gpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = result_of(proc)
    assert result["ok"] is False and result["mode"] == "ray"
    (cluster,) = [n for n in result["nodes"] if n["node"] == "cluster"]
    assert cluster["rows"] == [{"check": "gpu nodes", "expected": "1",
                                "found": "0 (no alive Ray node has a GPU resource)", "status": "FAIL"}]
    assert "training job was NOT submitted" in proc.stderr
