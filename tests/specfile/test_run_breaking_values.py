"""Values a user types that would break or leak a run are refused where they are typed: the field
types own what a value may be (blank, leading '-', credentials, the root folder, one Hydra value), the
launchers what the cluster accepts (sbatch's --time, Kubernetes names, volumes and ConfigMap size), and the
writer honours the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8spec.launchers.kuberay import k8s_name
from fp8spec.rules.runner import validate_path
from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, REPO, dump_yaml, patched

# Every field that holds a path or an address, and how a value is put there.
PATH_FIELDS = {
    "model.path": lambda v: {"model": {"path": v}},
    "model.config_path": lambda v: {"model": {"config_path": v}},
    "data.train_files": lambda v: {"data": {"train_files": v}},
    "data.val_files": lambda v: {"data": {"val_files": [v]}},
    "trainer.checkpoint_dir": lambda v: {"trainer": {"checkpoint_dir": v}},
    "reward.custom_function.path": lambda v: {"reward": {"custom_function": {"path": v}}},
    "cluster.address": lambda v: {"cluster": {"address": v}},
    "cluster.working_dir": lambda v: {"cluster": {"working_dir": v}},
    "cluster.kuberay.image": lambda v: {"cluster": {"kuberay": {"image": v}}},
}
blank = st.text(alphabet=" \t", min_size=1, max_size=4)
dashed = st.text(alphabet="abcdefghP-/.", min_size=0, max_size=12).map(lambda t: "-" + t)


def _errors_at(patch: dict) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(dump_yaml(patched(BASE_SPEC, patch)))
        result = validate_path(path)
    return [d for d in result.diagnostics if d.severity == "error"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(PATH_FIELDS)), st.one_of(blank, dashed))
def test_blank_or_dashed_paths_and_addresses_are_refused_where_typed(field, value):
    errors = _errors_at(PATH_FIELDS[field](value))
    located = [d for d in errors if d.path is not None and d.path.startswith(field)]
    assert located, (field, value, [(d.path, d.message) for d in errors])
    if value.strip(" "):  # (a tab is refused before, as a control character)
        return
    assert any("blank" in d.message for d in located)


@pytest.mark.parametrize(
    "address, ok",
    [
        ("https://admin:S3cretPassw0rd@ray.example.com:8265", False),
        ("user@head:8265", False),
        ("http://head node:8265", False),
        ("http://10.0.0.1:8265", True),
        ("ray://head.example.com:10001", True),
    ],
)
def test_cluster_address_without_credentials_or_blanks(address, ok):
    errors = [d for d in _errors_at({"cluster": {"address": address}}) if d.path == "cluster.address"]
    assert (not errors) == ok, [d.message for d in errors]
    if "S3cret" in address:
        assert "holds credentials" in errors[0].message


@pytest.mark.parametrize("value", ["/", "//", "/./", "-", "-P"])
def test_working_dirs_that_break_the_job_are_refused(value):
    assert [d for d in _errors_at({"cluster": {"working_dir": value}}) if d.path == "cluster.working_dir"]


def test_working_dir_dot_slash_is_the_bundle(write_spec, tmp_path):
    (tmp_path / "r.py").write_text("def compute_score(*a, **k):\n    return 0.0\n")
    spec = write_spec(patched(BASE_SPEC, {"cluster": {"working_dir": "./"}, "reward": {"custom_function": {"path": "r.py"}}}))
    result = validate_path(spec)
    assert not [d for d in result.diagnostics if d.code == "RWD005"]
    assert result.loaded.spec.cluster.working_dir == "."


def test_a_model_path_with_a_dash_never_reaches_serve_sh(tmp_path, write_spec):
    """R06: '--trust-remote-code' as model.path became a vllm serve flag."""
    spec = write_spec(patched(BASE_SPEC, {"model": {"path": "--trust-remote-code"}}))
    proc = run_cli_here("compile", str(spec), "--backend", "vllm", "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "model.path" in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["trainer.x=[1,", "trainer.x=choice(1,2)", "trainer.x=1,2", "a.b='x", "a.b={k: [1}"])
def test_extra_overrides_are_one_balanced_hydra_value(value):
    errors = _errors_at({"cluster": {"kuberay": {"extra_overrides": [value]}}})
    assert [d for d in errors if d.path == "cluster.kuberay.extra_overrides.0"], [d.message for d in errors]


@pytest.mark.parametrize(
    "value",
    ["trainer.x=[1,2]", "trainer.x={a: 1, b: [2, 3]}", "trainer.x='a,b'", "+trainer.y=int(3)", "~trainer.z",
     "trainer.default_local_dir=/checkpoints/run1", 'a.b="x(1,2)"'],
)
def test_extra_overrides_hydra_accepts_are_accepted(value):
    """The same judgement as Hydra's own override parser (hydra-core 1.3.8, the version verl pins)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(value)
    assert not parsed.is_sweep_override()
    assert not _errors_at({"cluster": {"kuberay": {"extra_overrides": [value]}}})


@pytest.mark.parametrize("value", ["trainer.x=[1,", "trainer.x=choice(1,2)", "trainer.x=1,2", "a.b='x"])
def test_hydra_itself_refuses_or_sweeps_what_is_refused(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_override(value)
    except HydraException:  # (OverrideParseException is one too)
        return
    assert parsed.is_sweep_override()


@pytest.mark.parametrize("value", ["-", "1:2:3:4", "1:2-3", "::", "1-:"])
def test_time_limits_sbatch_refuses_are_refused(value):
    errors = _errors_at({"cluster": {"slurm": {"time_limit": value}}})
    assert [d for d in errors if d.code == "LCH002" and d.path == "cluster.slurm.time_limit"], errors


@pytest.mark.parametrize("value", ["30", "30:00", "48:00:00", "2-00", "2-12:00", "2-00:00:00", "UNLIMITED", "0"])
def test_time_limits_sbatch_reads_are_accepted(value):
    assert not [d for d in _errors_at({"cluster": {"slurm": {"time_limit": value}}}) if d.code == "LCH002"]


def test_distinct_spec_names_get_distinct_kubernetes_names():
    names = ["a_b", "a-b", "a.b", "A-b", "a--b"]
    assert len({k8s_name(n) for n in names}) == len(names)
    assert k8s_name("qwen3-8b-fp8-rollout") == "qwen3-8b-fp8-rollout", "a valid name is kept"


@pytest.mark.parametrize(
    "volume", [{"name": "dshm", "mount_path": "/models", "host_path": "/models"},
               {"name": "shm", "mount_path": "/dev/shm/", "host_path": "/x"}],
)
def test_the_pods_shared_memory_volume_is_not_taken_twice(volume):
    errors = _errors_at({"cluster": {"launcher": "kuberay", "kuberay": {"volumes": [volume]}}})
    assert [d for d in errors if "shared-memory volume" in d.message], errors


# every path of the base spec on a volume, the checkpoint folder on a writable one (rules CLU002, CLU003)
MOUNTED = [{"name": "models", "mount_path": "/models", "pvc": "m"}, {"name": "data", "mount_path": "/data", "pvc": "d"},
           {"name": "shared", "mount_path": "/shared", "pvc": "s"}]


def _secret(env: str) -> dict:
    return {"cluster": {"launcher": "kuberay", "kuberay": {"volumes": MOUNTED,
                                                          "secret_env": [{"env": env, "secret": "s", "key": "k"}]}}}


@pytest.mark.parametrize("env", ["PATH", "PYTHONPATH", "RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR",
                                 "CUDA_VISIBLE_DEVICES", "LD_PRELOAD"])
def test_secrets_cannot_take_names_the_process_or_ray_own(env):
    errors = _errors_at(_secret(env))
    assert [d for d in errors if "pod_env.yaml" in d.message and env in d.message], errors


def test_ordinary_secret_names_pass():
    assert _errors_at(_secret("HF_TOKEN")) == []


def test_a_secret_named_like_the_recipes_env_is_refused_at_compile(tmp_path, write_spec):
    """The bundle sets FP8SPEC_RUNTIME_PATCHES (and the recipe's engine variables) for every Ray worker."""
    spec = write_spec(patched(BASE_SPEC, _secret("FP8SPEC_RUNTIME_PATCHES")))
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert "secret_env[0].env FP8SPEC_RUNTIME_PATCHES: the bundle sets it" in proc.stderr, proc.stderr
    assert "nothing written" in proc.stderr and not (tmp_path / "out").exists()


def test_a_configmap_over_the_kubernetes_limit_is_refused(tmp_path, write_spec):
    """R09: a 900 KB reward file made a 1,072,400-byte ConfigMap."""
    (tmp_path / "big.py").write_text("def compute_score(*a, **k):\n    return 0.0\n" + ("# " + "x" * 1021 + "\n") * 880)
    spec = write_spec(patched(BASE_SPEC, {"reward": {"custom_function": {"path": "big.py"}},
                                          "cluster": {"launcher": "kuberay", "kuberay": {"volumes": MOUNTED}}}))
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert "Kubernetes refuses more than 1048576" in proc.stderr and "nothing written" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("umask, folder, script, plain", [(0o077, 0o700, 0o700, 0o600), (0o022, 0o755, 0o755, 0o644)])
def test_bundle_files_honour_the_umask(tmp_path, write_spec, umask, folder, script, plain):
    """R08: 30 of 34 bundle paths were world-readable under umask 077."""
    spec = write_spec(BASE_SPEC)
    code = (
        f"import os, sys; os.umask({umask}); from fp8spec.cli import main; "
        f"sys.argv = ['fp8spec', 'compile', {str(spec)!r}, '-o', {str(tmp_path / 'out')!r}]; main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "out" / "base"
    for path in [bundle, *bundle.rglob("*")]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        want = folder if path.is_dir() else script if path.name.endswith((".sh", ".sbatch")) else plain
        assert mode == want, (path, oct(mode))
