"""The runtime patch set reaches Ray workers from the bundle alone, with no fp8spec installed anywhere they run.

A second virtual environment holds every package of the test environment except fp8spec (its site-packages
links to the others); a Ray job's worker runs in it (runtime_env ``py_executable``) with the bundle's own
runtime environment (``py_modules`` lib/fp8spec and the FP8 env vars, from runtime_env.yaml). The worker, and a
process it starts the way vLLM starts its workers, import ``fp8spec.runtime`` from the shipped copy and
activate the bundle's patches; the package's own import graph stays torch-only.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import REPO

pytestmark = pytest.mark.slow

RESULT = "SHIPPED-RUNTIME-RESULT "
WORKER_JOB = '''
import json, subprocess, sys, ray

@ray.remote(num_cpus=0)
def facts():
    import importlib.metadata as md, os
    import fp8spec.runtime as rt
    try:
        installed = md.version("fp8spec")
    except md.PackageNotFoundError:
        installed = None
    child = subprocess.run([sys.executable, "-c",
                            "import fp8spec.runtime as rt; print(rt.__file__, ','.join(sorted(rt.active_patches())))"],
                           capture_output=True, text=True)
    return {"python": sys.executable, "file": rt.__file__, "active": sorted(rt.active_patches()),
            "installed": installed, "child": child.stdout.strip(), "child_err": child.stderr[-2000:],
            "env": os.environ.get("FP8SPEC_RUNTIME_PATCHES")}

ray.init()
print("''' + RESULT + '''" + json.dumps(ray.get(facts.remote())), flush=True)
'''


@pytest.fixture(scope="module")
def venv_without_fp8spec(tmp_path_factory) -> Path:
    """A venv whose site-packages links every package of this environment but fp8spec."""
    root = tmp_path_factory.mktemp("nofp8")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    source = Path(sysconfig.get_paths()["purelib"])
    for entry in source.iterdir():
        name = entry.name.lower()
        if "fp8spec" in name or entry.name == "__pycache__":
            continue
        if entry.suffix == ".pth" and ("fp8spec" in entry.read_text(errors="replace") or
                                       str(REPO) in entry.read_text(errors="replace")):
            continue
        (target / entry.name).symlink_to(entry)
    check = subprocess.run([str(python), "-c", "import ray, torch, verl\nimport fp8spec"], capture_output=True,
                           text=True, timeout=120, cwd=root)
    assert "ModuleNotFoundError: No module named 'fp8spec'" in check.stderr, check.stderr
    return python


def test_worker_without_fp8spec_imports_the_shipped_copy(ray_head, bundle_8b, bundle_copy, venv_without_fp8spec,
                                                         tmp_path):
    bundle = bundle_copy(bundle_8b)
    runtime_env = YAML(typ="safe").load((bundle / "runtime_env.yaml").read_text())
    assert runtime_env["py_modules"] == ["lib/fp8spec"]
    runtime_env["py_executable"] = str(venv_without_fp8spec)
    (bundle / "worker_job.py").write_text(WORKER_JOB)
    proc = subprocess.run(["ray", "job", "submit", "--address", ray_head.dashboard, "--runtime-env-json",
                           json.dumps(runtime_env), "--", "python3", "worker_job.py"],
                          cwd=bundle, env=ray_head.env, capture_output=True, text=True, timeout=240)
    lines = {line for line in proc.stdout.splitlines() if line.startswith(RESULT)}
    assert len(lines) == 1, proc.stdout + proc.stderr
    facts = json.loads(lines.pop()[len(RESULT):])
    assert facts["python"] == str(venv_without_fp8spec) and facts["installed"] is None
    assert "/runtime_resources/py_modules_files/" in facts["file"] and facts["file"].endswith(
        "/fp8spec/runtime/__init__.py")
    # the bundle's own: fast_block_quant,kv_scales,replay_poll
    patches = runtime_env["env_vars"]["FP8SPEC_RUNTIME_PATCHES"]
    assert facts["env"] == patches and facts["active"] == sorted(patches.split(","))
    # a process the worker starts (as vLLM starts its workers) inherits the path and imports the same copy
    assert facts["child"] == f"{facts['file']} {patches}", facts["child_err"]


def test_shipped_package_imports_nothing_else_of_fp8spec():
    """fp8spec/__init__.py and fp8spec/runtime import no other fp8spec module (torch, triton and the libraries
    they patch are the cluster's): the copy in lib/ is complete."""
    from fp8spec.patchset import shipped_files

    files = shipped_files()
    shipped = {p[: -len(".py")].replace("/", ".").removesuffix(".__init__") for p in files}
    assert "fp8spec/__init__.py" in files and "fp8spec/runtime/__init__.py" in files
    assert ast.parse(files["fp8spec/__init__.py"]).body[-1].targets[0].id == "__version__"
    for path, text in files.items():
        module = path[: -len(".py")].replace("/", ".").removesuffix(".__init__")
        package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                names = [f"{base}.{node.module}" if node.module else base]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] == "fp8spec":  # the package itself (__version__) or a module of the runtime
                    assert name in shipped, (path, name)
