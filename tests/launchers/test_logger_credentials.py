"""A logger's credential (WANDB_API_KEY for wandb): the preflight checks it, submit.sh passes it to the jobs
without writing it into the bundle, and the README says how."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import BASE_SPEC, patched
from tests.launchers import stubs
from tests.launchers.conftest import compile_bundle
from tests.launchers.test_preflight_program import run_program

WANDB = patched(BASE_SPEC, {"name": "with-wandb", "trainer": {"loggers": ["console", "wandb"]}})
KEY = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def wandb_bundle(write_spec, tmp_path):
    return compile_bundle(write_spec(WANDB), tmp_path / "out")


def test_the_preflight_expects_the_key_only_for_wandb(wandb_bundle, write_spec, tmp_path):
    (cred,) = json.loads((wandb_bundle / "preflight.json").read_text())["credentials"]
    assert (cred["env"], cred["logger"]) == ("WANDB_API_KEY", "wandb")
    plain = compile_bundle(write_spec(BASE_SPEC, "plain.yaml"), tmp_path / "plain")
    assert json.loads((plain / "preflight.json").read_text())["credentials"] == []
    assert "WANDB_API_KEY" not in (plain / "README.md").read_text() + (plain / "submit.sh").read_text()


def _credential_row(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if "credential WANDB_API_KEY" in line)


def test_the_preflight_fails_without_the_key(wandb_bundle, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    bare = run_program(wandb_bundle, "--local", "--skip-gpu-checks", env_extra={"HOME": str(home)})
    assert bare.returncode == 1
    assert _credential_row(bare.stdout).rstrip().endswith("FAIL")
    assert "credential WANDB_API_KEY expected 'set (the wandb logger)'" in bare.stdout
    given = run_program(wandb_bundle, "--local", "--skip-gpu-checks",
                        env_extra={"HOME": str(home), "WANDB_API_KEY": KEY})
    assert _credential_row(given.stdout).rstrip().endswith("PASS") and KEY not in given.stdout
    (home / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password x\n")
    logged_in = run_program(wandb_bundle, "--local", "--skip-gpu-checks", env_extra={"HOME": str(home)})
    assert _credential_row(logged_in.stdout).rstrip().endswith("PASS")


def test_submit_passes_the_key_to_both_jobs_and_never_into_the_bundle(wandb_bundle, tmp_path):
    import subprocess

    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    stubs.install(bin_dir, sys.executable)
    before = {p: p.read_bytes() for p in wandb_bundle.rglob("*") if p.is_file()}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = stubs.env_with_stubs(bin_dir, log, WANDB_API_KEY=KEY, TMPDIR=str(scratch))
    proc = subprocess.run(["bash", str(wandb_bundle / "submit.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [c["text"] for c in stubs.calls(log, "ray-runtime-env")]
    assert len(sent) == 2  # the preflight job and the training job
    original = (wandb_bundle / "runtime_env.yaml").read_text()
    for text in sent:
        from ruamel.yaml import YAML

        got, want = YAML(typ="safe").load(text), YAML(typ="safe").load(original)
        assert got["env_vars"] == {**(want["env_vars"] or {}), "WANDB_API_KEY": KEY}
        assert {k: v for k, v in got.items() if k != "env_vars"} == {k: v for k, v in want.items() if k != "env_vars"}
    assert {p: p.read_bytes() for p in wandb_bundle.rglob("*") if p.is_file()} == before
    assert not list(scratch.iterdir())  # the copy with the key is gone after the script
    # without the key in the shell the bundle's own runtime_env.yaml goes, unchanged
    log.unlink()
    env.pop("WANDB_API_KEY")
    assert subprocess.run(["bash", str(wandb_bundle / "submit.sh")], env=env, capture_output=True).returncode == 0
    assert [c["text"] for c in stubs.calls(log, "ray-runtime-env")] == [original, original]


def test_a_key_that_is_no_key_is_refused_before_submitting(wandb_bundle, tmp_path):
    import subprocess

    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    stubs.install(bin_dir, sys.executable)
    env = stubs.env_with_stubs(bin_dir, log, WANDB_API_KEY="abc'\n  X: y")
    proc = subprocess.run(["bash", str(wandb_bundle / "submit.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "WANDB_API_KEY" in proc.stderr
    assert not stubs.calls(log, "ray")


def test_the_readme_says_how_to_pass_the_key(wandb_bundle):
    readme = (wandb_bundle / "README.md").read_text()
    assert "wandb needs `WANDB_API_KEY`" in readme and "never written into the bundle" in readme
