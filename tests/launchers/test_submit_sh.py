"""submit.sh: valid bash, and under a stub `ray` that records its argv it submits the preflight first, the
training job only when the preflight succeeded, with the bundle's ids, address and runtime env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BASE_SPEC, patched
from tests.launchers import stubs
from tests.launchers.conftest import compile_bundle


@pytest.fixture
def stub(tmp_path):
    bin_dir = tmp_path / "bin"
    stubs.install(bin_dir, sys.executable)
    log = tmp_path / "calls.jsonl"

    def run(bundle, *args, cwd=None, **env):
        proc = subprocess.run(["bash", str(bundle / "submit.sh"), *args], cwd=cwd or tmp_path,
                              env=stubs.env_with_stubs(bin_dir, log, **env), capture_output=True, text=True,
                              timeout=60)
        return proc, stubs.calls(log, "ray")

    return run


def test_bash_syntax(bundle_8b, bundle_30b):
    for bundle in (bundle_8b, bundle_30b):
        proc = subprocess.run(["bash", "-n", str(bundle / "submit.sh")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_preflight_then_training_job(stub, bundle_8b):
    expected = json.loads((bundle_8b / "preflight.json").read_text())
    sub_id = expected["submission_id"]
    assert sub_id == f"fp8spec-qwen3-8b-fp8-rollout-fsdp-vllm-{expected['spec']['sha256'][:12]}"
    proc, ray = stub(bundle_8b)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c["argv"] for c in ray] == [
        ["job", "submit", "--address", "http://127.0.0.1:8265", "--submission-id", f"{sub_id}-preflight",
         "--runtime-env", "runtime_env.yaml", "--", "python3", "./preflight.py"],
        ["job", "status", "--address", "http://127.0.0.1:8265", f"{sub_id}-preflight"],
        ["job", "submit", "--address", "http://127.0.0.1:8265", "--submission-id", sub_id,
         "--runtime-env", "runtime_env.yaml", "--no-wait", "--", "bash", "./launch.sh"],
    ]
    # runs from the bundle folder, so runtime_env.yaml and its working_dir "." are the bundle
    assert {c["cwd"] for c in ray} == {str(bundle_8b)}


def test_options(stub, bundle_8b):
    sub_id = json.loads((bundle_8b / "preflight.json").read_text())["submission_id"]
    proc, ray = stub(bundle_8b, "--address", "http://10.1.2.3:8265", "--id-suffix", "retry2", "--skip-gpu-checks",
                     "--wait", "--", "trainer.total_epochs=2", "data.x='a b'")
    assert proc.returncode == 0, proc.stderr
    assert ray[0]["argv"] == ["job", "submit", "--address", "http://10.1.2.3:8265", "--submission-id",
                              f"{sub_id}-retry2-preflight", "--runtime-env", "runtime_env.yaml", "--", "python3",
                              "./preflight.py", "--skip-gpu-checks"]
    assert ray[2]["argv"] == ["job", "submit", "--address", "http://10.1.2.3:8265", "--submission-id",
                              f"{sub_id}-retry2", "--runtime-env", "runtime_env.yaml", "--", "bash", "./launch.sh",
                              "trainer.total_epochs=2", "data.x='a b'"]
    only, ray = stub(bundle_8b, "--preflight-only")
    assert only.returncode == 0 and [c["argv"][:2] for c in ray][-1] == ["job", "status"]
    assert "training job was not submitted" in only.stdout


@pytest.mark.parametrize("env,reason", [
    ({"STUB_PREFLIGHT_RC": "1"}, "the preflight job failed"),
    ({"STUB_STATUS": "Job '{}' was stopped"}, "the preflight was stopped: `ray job submit` exits 0"),
    ({"STUB_STATUS": "Status for job '{}': RUNNING"}, "the log stream ended before the job did"),
])
def test_no_training_job_unless_the_preflight_succeeded(stub, bundle_8b, env, reason):
    proc, ray = stub(bundle_8b, **env)
    assert proc.returncode == 1, reason
    assert "training job was NOT submitted" in proc.stderr
    assert not any(c["argv"][:2] == ["job", "submit"] and "./launch.sh" in c["argv"] for c in ray), reason


def test_bad_arguments(stub, bundle_8b):
    for args in (["--bogus"], ["--address"], ["--id-suffix", "a b"], ["--id-suffix", "$(id)"]):
        proc, ray = stub(bundle_8b, *args)
        assert proc.returncode == 2 and ray == [], args
    help_, ray = stub(bundle_8b, "--help")
    assert help_.returncode == 0 and "--preflight-only" in help_.stdout and ray == []
    assert help_.stdout.startswith("Submit spec ") and "set -euo" not in help_.stdout


def test_working_dir_above_the_bundle(stub, write_spec, tmp_path):
    """working_dir '..' (the folder holding the bundle): the entrypoints name the files inside it."""
    spec = write_spec(patched(BASE_SPEC, {"name": "wd-up", "cluster": {"working_dir": ".."}}))
    bundle = compile_bundle(spec, tmp_path / "out")
    proc, ray = stub(bundle)
    assert proc.returncode == 0, proc.stderr
    assert ray[0]["argv"][-2:] == ["python3", "wd-up/preflight.py"]
    assert ray[2]["argv"][-2:] == ["bash", "wd-up/launch.sh"]


def test_working_dir_that_does_not_hold_the_bundle_is_refused(stub, write_spec, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    spec = write_spec(patched(BASE_SPEC, {"name": "wd-off", "cluster": {"working_dir": str(tmp_path / "elsewhere")}}))
    bundle = compile_bundle(spec, tmp_path / "out")
    proc, ray = stub(bundle)
    assert proc.returncode == 2 and ray == []
    assert "does not contain this bundle" in proc.stderr


def test_spec_values_are_quoted_not_run(stub, write_spec, tmp_path):
    """An address or working_dir holding shell syntax reaches `ray` as one literal argument. (An address
    has no blanks: the commands here need none.)"""
    pwned = tmp_path / "pwned"
    address = f"http://h:1/$(id>{pwned})`id>{pwned}`;id>{pwned}|'q\"a"
    work = tmp_path / "my dir $(touch x) 'q'"
    spec = write_spec(patched(BASE_SPEC, {"name": "quoted", "cluster": {"address": address,
                                                                         "working_dir": str(work)}}))
    bundle = compile_bundle(spec, work / "out")
    assert subprocess.run(["bash", "-n", str(bundle / "submit.sh")]).returncode == 0
    proc, ray = stub(bundle)
    assert proc.returncode == 0, proc.stderr
    assert ray[0]["argv"][2:4] == ["--address", address]
    assert ray[0]["argv"][-1] == "out/quoted/preflight.py"
    assert not pwned.exists()


def test_missing_ray_is_named(bundle_8b, tmp_path):
    """Without the `ray` command, submit.sh says so (exit 2) instead of pointing at a table it never printed."""
    import shutil

    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "ray").exists())
    assert shutil.which("ray", path=path) is None
    proc = subprocess.run(["bash", str(bundle_8b / "submit.sh")], env=dict(os.environ, PATH=path),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("submit.sh: the `ray` command is not on PATH: activate the Python environment "
                                   "that has ray[default] (it submits the jobs)")
    assert "table" not in proc.stderr
