"""Every guarded path is judged as its user will see it (fp8spec/specfile/paths.py): ``~user`` expanded or refused
where it is written, ``..`` and symbolic links resolved from the folder the path counts from. A path no text
check can judge (``cluster.working_dir`` counts from the bundle folder) is judged at compile, and again by the
bundle's scripts where they run."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from fp8spec.specfile.paths import PathError, expand_user, is_root, lexical, resolved
from tests.cli.inprocess import run_cli_here
from tests.conftest import SPECS

UNKNOWN_HOME = "~nosuchuser_fp8spec_zz"
DEEP_UP = "/".join([".."] * 40)


def _fixture(folder: Path, *, reward: bool = True) -> Path:
    (folder / "models" / "tiny-qwen3").mkdir(parents=True)
    (folder / "rewards").mkdir()
    shutil.copy(SPECS / "models" / "tiny-qwen3" / "config.json", folder / "models" / "tiny-qwen3")
    shutil.copy(SPECS / "rewards" / "tiny_arith.py", folder / "rewards")
    text = (SPECS / "tiny-qwen3-h200.yaml").read_text(encoding="utf-8")
    if not reward:  # a working_dir other than '.' would move the shipped reward file away from verl (RWD005)
        start = text.index("reward:\n  custom_function:\n")
        end = text.index("\n", text.index("    path: rewards/tiny_arith.py", start)) + 1
        text = text[:start] + text[end:]
    spec = folder / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def _set(spec: Path, old: str, new: str) -> None:
    text = spec.read_text(encoding="utf-8")
    assert old in text
    spec.write_text(text.replace(old, new, 1), encoding="utf-8")


def _line_of(spec: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(spec.read_text().splitlines(), 1) if needle in ln)


# ------------------------------------------------------------------------------------------------ ~user
@pytest.mark.parametrize(
    "old, field",
    [
        ("config_path: models/tiny-qwen3/config.json", "config_path: "),
        ("path: rewards/tiny_arith.py", "path: "),
    ],
    ids=["model.config_path", "reward.custom_function.path"],
)
@pytest.mark.parametrize("command", ["validate", "compile", "plan", "explain"])
def test_unknown_home_in_a_spec_path_field_is_located(tmp_path, old, field, command):
    spec = _fixture(tmp_path)
    _set(spec, old, f"{field}{UNKNOWN_HOME}/x" + (".py" if "reward" in old else "/config.json"))
    args = [command, str(spec)] + (["-o", str(tmp_path / "out")] if command == "compile" else [])
    proc = run_cli_here(*args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "internal error" not in out
    line = _line_of(spec, UNKNOWN_HOME)
    assert f"{spec}:{line}:" in out and f"this machine has no user '{UNKNOWN_HOME[1:]}'" in out, out
    assert not (tmp_path / "out").exists()


def test_unknown_home_in_init_config_path_is_one_line_exit_2(tmp_path):
    proc = run_cli_here("init", "--config-path", f"{UNKNOWN_HOME}/x", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fp8spec: error: --config-path '{UNKNOWN_HOME}/x'"), lines


def test_expand_user_expands_known_homes_and_refuses_unknown(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    assert expand_user("~/m/config.json") == "/home/someone/m/config.json"
    assert expand_user("~") == "/home/someone"
    assert expand_user("models/~x") == "models/~x"
    with pytest.raises(PathError, match="no user"):
        expand_user(f"{UNKNOWN_HOME}/config.json")


# ------------------------------------------------------------------------------------------------ working_dir
def test_resolved_climbs_no_higher_than_root(tmp_path):
    assert is_root(resolved(DEEP_UP, tmp_path))
    depth = len(tmp_path.resolve().parts) - 1
    assert is_root(resolved("/".join([".."] * depth), tmp_path))
    assert not is_root(resolved("/".join([".."] * (depth - 1)), tmp_path))
    assert lexical("//dev//./shm/") == "/dev/shm" and is_root("//") and is_root("/tmp/../..")


@pytest.mark.parametrize("value", ["/", "//", "/./", "/tmp/../..", "///tmp/..", "/.."])
def test_absolute_root_working_dir_is_refused_where_it_is_typed(tmp_path, value):
    spec = _fixture(tmp_path, reward=False)
    _set(spec, "launcher: ray\n", f"launcher: ray\n  working_dir: '{value}'\n")
    proc = run_cli_here("validate", str(spec), cwd=tmp_path)
    assert proc.returncode == 1
    assert f"{spec}:{_line_of(spec, 'working_dir')}:" in proc.stdout and "is the root folder" in proc.stdout


def _root_from_bundle(tmp_path: Path) -> list[str]:
    """working_dir values that are '/' seen from tmp_path/out/<bundle>: by climbing, and through a link."""
    (tmp_path / "out").mkdir()
    os.symlink("/", tmp_path / "out" / "to-root")
    depth = len((tmp_path / "out" / "tiny-qwen3-h200-fp8").resolve().parts) - 1
    return [DEEP_UP, "/".join([".."] * depth), "/".join([".."] * depth) + "/", "../to-root", "./../to-root/."]


@pytest.mark.parametrize("launcher", ["ray", "slurm"])
def test_working_dir_that_resolves_to_root_is_refused_at_compile(tmp_path, launcher):
    for i, value in enumerate(_root_from_bundle(tmp_path)):
        spec = _fixture(tmp_path / f"s{i}", reward=False)
        _set(spec, "launcher: ray\n", f"launcher: {launcher}\n  working_dir: '{value}'\n")
        proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
        assert proc.returncode == 1, (value, proc.stdout + proc.stderr)
        line = _line_of(spec, "working_dir")
        assert f"{spec}:{line}:" in proc.stderr and "cluster.working_dir" in proc.stderr, proc.stderr
        assert "is the root folder" in proc.stderr and "nothing written" in proc.stderr
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["to-root"]


def test_working_dir_above_the_bundle_but_not_root_still_compiles(tmp_path):
    spec = _fixture(tmp_path, reward=False)
    _set(spec, "launcher: ray\n", "launcher: ray\n  working_dir: '..'\n")
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_submit_sh_refuses_a_working_dir_that_is_root_where_it_runs(tmp_path):
    """A bundle compiled where '../../..' is a folder, then moved to /tmp/X/bundle where it is '/'."""
    spec = _fixture(tmp_path, reward=False)
    _set(spec, "launcher: ray\n", "launcher: ray\n  working_dir: '../../..'\n")
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "ray").write_text(f"#!/bin/bash\necho \"$@\" >> {tmp_path}/ray.log\nexit 0\n")
    (stubs / "ray").chmod(0o755)
    moved = Path("/tmp") / f"fp8spec-wd-{uuid.uuid4().hex}"
    try:
        shutil.copytree(tmp_path / "out", moved)  # /tmp/X/bundle: '../../..' is '/'
        env = {k: v for k, v in os.environ.items() if k != "RAY_JOB_CONFIG_JSON_ENV_VAR"}
        run = subprocess.run(
            ["bash", "submit.sh", "--preflight-only"], cwd=moved / "tiny-qwen3-h200-fp8", capture_output=True,
            text=True, env={**env, "PATH": f"{stubs}:{env['PATH']}"}, timeout=60,
        )
        # launch.sh run by hand on a Ray head (not inside a Ray job) gives the working_dir to ray.init
        by_hand = subprocess.run(["bash", "launch.sh"], cwd=moved / "tiny-qwen3-h200-fp8", capture_output=True,
                                 text=True, env={**env, "PATH": f"{stubs}:{env['PATH']}"}, timeout=60)
    finally:
        shutil.rmtree(moved)
    assert run.returncode != 0
    assert "is the root folder here" in run.stderr, run.stderr
    assert by_hand.returncode == 2 and "is the root folder here" in by_hand.stderr, by_hand.stderr
    assert not (tmp_path / "ray.log").exists() or "submit" not in (tmp_path / "ray.log").read_text()


# ------------------------------------------------------------------------------------------------ KubeRay mounts
@pytest.mark.parametrize("mount", ["//dev/shm", "/dev//shm", "/dev/./shm/", "/dev/x/../shm"])
def test_pod_shm_mount_is_refused_in_every_spelling(tmp_path, mount):
    spec = _fixture(tmp_path)
    _set(spec, "launcher: ray\n", "launcher: kuberay\n  kuberay:\n    volumes:\n"
         f"      - {{name: s, mount_path: '{mount}', host_path: /mnt/s}}\n")
    proc = run_cli_here("validate", str(spec), cwd=tmp_path)
    assert proc.returncode == 1 and "shared-memory volume" in proc.stdout, proc.stdout


def test_one_mount_path_in_two_spellings_is_used_twice(tmp_path):
    spec = _fixture(tmp_path)
    _set(spec, "launcher: ray\n", "launcher: kuberay\n  kuberay:\n    volumes:\n"
         "      - {name: a, mount_path: /models, host_path: /mnt/a}\n"
         "      - {name: b, mount_path: '/models/', host_path: /mnt/b}\n")
    proc = run_cli_here("validate", str(spec), cwd=tmp_path)
    assert proc.returncode == 1 and "used twice" in proc.stdout, proc.stdout
