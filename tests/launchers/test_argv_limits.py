"""Every program a bundle starts gets arguments Linux accepts (MAX_ARG_STRLEN, backends/linux/limits.yaml).

The KubeRay entrypoint is one argument of ``sh -c``: it carries no spec value, the extra overrides go in a script
in the ConfigMap and reach launch.sh exactly, however large the spec makes them. launch.sh's and serve.sh's
commands are measured at compile: a word over the limit is refused there (exit 1, nothing written), not on the
cluster with E2BIG."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from fp8spec.launchers import argv
from fp8spec.launchers.base import BundleError
from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, SPECS, patched
from tests.launchers.conftest import compile_bundle

LIMIT = 131072

# override texts whose shell quoting grows them: 15 of 4 KiB make a spec of ~60 KiB and, quoted into one
# command line, ~300 KiB
HEAVY = {
    "single-quotes": ["+trainer.a%d=\"%s\"" % (i, "'" * 4070) for i in range(15)],
    "mixed": ["+trainer.b%d='%s'" % (i, "\"$`\\!" * 600) for i in range(12)],
    "multibyte": ["+trainer.c%d='%s'" % (i, "é'ü" * 1000) for i in range(8)],
}


def _configmap(bundle: Path, into: Path) -> str:
    """Write the ConfigMap's files into ``into`` (as the submitter pod mounts them); return the entrypoint."""
    docs = {d["kind"]: d for d in YAML(typ="safe").load_all((bundle / "rayjob.yaml").read_text(encoding="utf-8"))}
    for key, text in docs["ConfigMap"]["data"].items():
        path = into / key.replace("--", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return docs["RayJob"]["spec"]["entrypoint"]


def _run_entrypoint(bundle: Path, tmp_path: Path) -> list[str]:
    """Run the RayJob entrypoint with sh -c, preflight.py and launch.sh replaced by recorders: the words
    launch.sh receives."""
    wd = tmp_path / "configmap"
    wd.mkdir()
    entrypoint = _configmap(bundle, wd)
    (wd / "preflight.py").write_text("")
    (wd / "launch.sh").write_text('for a in "$@"; do printf "%s\\0" "$a"; done > args.bin\n')
    shim = tmp_path / "bin"
    shim.mkdir()
    os.symlink(shutil.which("python3") or shutil.which("python"), shim / "python3")
    proc = subprocess.run(["/bin/sh", "-c", entrypoint], cwd=wd, capture_output=True, timeout=60,
                          env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    return (wd / "args.bin").read_bytes().decode("utf-8").split("\0")[:-1]


# every path the base spec's job opens is on a volume (CLU002, CLU003)
VOLUMES = [{"name": "models", "mount_path": "/models", "pvc": "m"}, {"name": "data", "mount_path": "/data", "pvc": "d"},
           {"name": "ckpt", "mount_path": "/shared", "pvc": "c"}]


@pytest.mark.parametrize("case", sorted(HEAVY))
def test_kuberay_extra_overrides_of_any_size_reach_launch_sh_exactly(tmp_path, case):
    overrides = HEAVY[case]
    spec = patched(BASE_SPEC, {"cluster": {"launcher": "kuberay", "kuberay": {
        "image": "registry.example/verl:1", "extra_overrides": overrides, "volumes": VOLUMES}}})
    path = tmp_path / "spec.yaml"
    from tests.conftest import dump_yaml

    path.write_text(dump_yaml(spec), encoding="utf-8")
    assert len(path.read_bytes()) < 64 * 1024
    bundle = compile_bundle(path, tmp_path / "out")
    entrypoint = _configmap(bundle, tmp_path / "peek")
    assert len(entrypoint.encode()) < 200 and "trainer." not in entrypoint
    assert _run_entrypoint(bundle, tmp_path) == overrides


def test_kuberay_without_extra_overrides_runs_launch_sh_directly(tmp_path):
    spec = patched(BASE_SPEC, {"cluster": {"launcher": "kuberay", "kuberay": {"image": "registry.example/verl:1",
                                                                               "volumes": VOLUMES}}})
    path = tmp_path / "spec.yaml"
    from tests.conftest import dump_yaml

    path.write_text(dump_yaml(spec), encoding="utf-8")
    bundle = compile_bundle(path, tmp_path / "out")
    assert _configmap(bundle, tmp_path / "peek") == "python3 preflight.py && bash launch.sh"
    assert _run_entrypoint(bundle, tmp_path) == []


def test_the_limit_is_linux_max_arg_strlen():
    assert argv.max_arg_bytes() == LIMIT
    argv.check_arguments("x", ["a" * (LIMIT - 1)])  # with its NUL: exactly the limit
    with pytest.raises(BundleError, match="argument 1 .* 131073 bytes"):
        argv.check_arguments("x", ["ok", "a" * LIMIT])
    with pytest.raises(BundleError, match="131073 bytes"):  # measured in bytes, not characters
        argv.check_arguments("x", ["é" * (LIMIT // 2)])


@pytest.mark.parametrize("spec_file, launcher, where", [
    ("tiny-qwen3-h200.yaml", "ray", "launch.sh: the verl command"),
    ("tiny-qwen3-h200.yaml", "slurm", "launch.sh: the verl command"),
    ("tiny-qwen3-h200.yaml", "kuberay", "launch.sh: the verl command"),
])
def test_every_launcher_measures_its_command_at_compile(tmp_path, monkeypatch, spec_file, launcher, where):
    """With the limit lowered below the longest override an example makes, compile refuses, naming the word,
    and writes nothing: the check is on every path that starts verl."""
    src = SPECS / spec_file
    folder = tmp_path / "s"
    shutil.copytree(SPECS, folder, ignore=shutil.ignore_patterns("*.json"))
    shutil.copy(SPECS / "models" / "tiny-qwen3" / "config.json", folder / "models" / "tiny-qwen3" / "config.json")
    spec = folder / src.name
    text = spec.read_text().replace("launcher: ray\n", f"launcher: {launcher}\n", 1)
    if launcher == "kuberay":
        kuberay = ("  kuberay:\n    image: r.example/v:1\n    volumes:\n"
                   "      - {name: rl, mount_path: /tmp/fp8spec-rl, pvc: rl}\n")  # every path the job opens (CLU002/3)
        text = text.replace(f"launcher: {launcher}\n", f"launcher: {launcher}\n{kuberay}", 1)
    spec.write_text(text)
    monkeypatch.setattr(argv, "max_arg_bytes", lambda: 64)
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"error: {where}: argument" in proc.stderr and "nothing written" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
