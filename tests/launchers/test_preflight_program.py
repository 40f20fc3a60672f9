"""preflight.py on its own: its checks on synthetic node facts (GPU nodes CI does not have), the --local mode
on this CPU machine, and that it needs nothing of fp8spec."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launchers.conftest import compile_bundle

DATA = Path(__file__).with_name("data")
PROGRAM = Path(__file__).resolve().parents[2] / "fp8spec" / "preflight" / "preflight.py"


@pytest.fixture(scope="module")
def cpus():
    spec = importlib.util.spec_from_file_location("preflight_cpus_under_test", PROGRAM.with_name("preflight_cpus.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checks():
    spec = importlib.util.spec_from_file_location("preflight_checks_under_test", PROGRAM.with_name("preflight_checks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pf():
    spec = importlib.util.spec_from_file_location("preflight_under_test", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def h200_bundle(tmp_path_factory) -> Path:
    return compile_bundle(DATA / "h200-single.yaml", tmp_path_factory.mktemp("h200"))


@pytest.fixture(scope="module")
def expected(h200_bundle) -> dict:
    return json.loads((h200_bundle / "preflight.json").read_text())


def h200_facts(expected: dict, **changes) -> dict:
    """What a healthy H200 node with the bundle's stack would report."""
    facts = {
        "hostname": "gpu-node-1", "ip": "10.0.0.1", "python": "3.12.3", "skip_gpu": False,
        "torch": {"installed": True, "version": "2.11.0+cu130", "cuda": "13.0", "available": True,
                  "devices": [{"name": "NVIDIA H200", "cc": "9.0"}] * expected["hardware"]["gpus_per_node"]},
        "packages": {p["name"]: {"distribution": p["name"], "version": p["version"].removeprefix(">=")}
                     for p in expected["packages"]},
        "env": dict(expected["env"]),
        "model": {"status": "read", "path": "/models/x/config.json", "values": dict(expected["model"]["config"])},
        "runtime": {"path": "/tmp/ray/py_modules_files/_ray_pkg_1/fp8spec", "files": dict(expected["runtime"]["files"]),
                    "sha256": expected["runtime"]["sha256"]},
        "data": {path: {"status": "file", "size": 1000} for path in expected["data"]["files"]},
    }
    for key, value in changes.items():
        facts[key] = value
    return facts


def statuses(rows) -> dict[str, str]:
    return {r["check"]: r["status"] for r in rows}


def test_bundle_expectations_for_h200(expected):
    assert expected["hardware"] == {"gpu": "h200", "device_name": "H200", "compute_capability": "9.0",
                                    "arch": "hopper", "nodes": 1, "gpus_per_node": 1, "cuda": "13.0"}
    # flash-attn: verl's FSDP model asks transformers for flash_attention_2 unless training.attention says otherwise
    assert {p["name"]: p["version"] for p in expected["packages"]} == {"verl": "0.9.1", "vllm": "0.24.0",
                                                                       "flash-attn": ">=2.3.3"}
    from fp8spec.patchset import shipped_fileset

    # a dense FSDP spec at rollout tp 1 on vLLM 0.24.0: auto's weight-sync quantizer is the direct path
    assert expected["runtime"] == {**shipped_fileset(), "patches": ["direct_sync", "kv_scales", "replay_poll"]}
    assert expected["model"]["config"] == {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                                           "num_key_value_heads": 8, "num_experts": 0, "vocab_size": 151936}


def test_healthy_gpu_node_passes(pf, expected, checks):
    rows = checks.check_node(expected, h200_facts(expected), skip_gpu=False)
    assert set(statuses(rows).values()) <= {"PASS", "INFO"}, rows
    assert statuses(rows)["gpu"] == statuses(rows)["gpu count"] == statuses(rows)["torch cuda"] == "PASS"


@pytest.mark.parametrize("devices,reason", [
    ([{"name": "NVIDIA H100 80GB HBM3", "cc": "9.0"}], "another Hopper part"),
    ([{"name": "NVIDIA H20", "cc": "9.0"}], "H20 is not H200"),
    ([{"name": "NVIDIA A100-SXM4-80GB", "cc": "8.0"}], "no FP8 tensor cores"),
    ([{"name": "NVIDIA H200", "cc": "8.0"}], "wrong compute capability"),
    ([], "no device"),
])
def test_wrong_gpu_fails(pf, expected, devices, reason, checks):
    torch_facts = dict(h200_facts(expected)["torch"], devices=devices)
    rows = checks.check_node(expected, h200_facts(expected, torch=torch_facts), skip_gpu=False)
    assert statuses(rows)["gpu"] == "FAIL", reason


def test_gpu_count_and_cuda_mismatch_fail(pf, expected, checks):
    two = dict(h200_facts(expected)["torch"], devices=[{"name": "NVIDIA H200", "cc": "9.0"}] * 2)
    assert statuses(checks.check_node(expected, h200_facts(expected, torch=two), False))["gpu count"] == "FAIL"
    old_cuda = dict(h200_facts(expected)["torch"], cuda="12.4")
    rows = checks.check_node(expected, h200_facts(expected, torch=old_cuda), False)
    assert statuses(rows)["torch cuda"] == "FAIL"
    assert statuses(checks.check_node(expected, h200_facts(expected), False))["torch cuda"] == "PASS"


def test_gpu_name_matching(pf, checks):
    assert checks.gpu_name_matches("NVIDIA H200", "H200") and checks.gpu_name_matches("NVIDIA H200 NVL", "H200")
    assert checks.gpu_name_matches("NVIDIA B200", "B200") and checks.gpu_name_matches("NVIDIA GB200", "GB200")
    assert not checks.gpu_name_matches("NVIDIA GB200", "B200")
    assert not checks.gpu_name_matches("NVIDIA H200", "H20") and checks.gpu_name_matches("NVIDIA H20", "H20")
    assert checks.gpu_name_matches("NVIDIA A100-SXM4-80GB", "A100") and checks.gpu_name_matches("NVIDIA L40S", "L40S")


def test_cpu_node_with_skip_reports_and_does_not_judge(pf, expected, checks):
    cpu = {"installed": True, "version": "2.13.0+cpu", "cuda": None, "available": False, "devices": []}
    rows = {r["check"]: r for r in checks.check_node(expected, h200_facts(expected, torch=cpu), skip_gpu=True)}
    assert rows["gpu"]["status"] == "SKIP" and "no CUDA device" in rows["gpu"]["found"]
    assert rows["gpu count"]["found"] == "0" and rows["gpu count"]["status"] == "SKIP"
    assert rows["torch cuda"]["found"] == "none (CPU build of torch)" and rows["torch cuda"]["status"] == "SKIP"
    # the same node without --skip-gpu-checks fails on all three
    judged = statuses(checks.check_node(expected, h200_facts(expected, torch=cpu), skip_gpu=False))
    assert judged["gpu"] == judged["gpu count"] == judged["torch cuda"] == "FAIL"


@pytest.mark.parametrize(
    "spec, listed",
    [("qwen3-8b", True), ("tiny-qwen3-h200", False), ("qwen3-30b", True), ("tiny-qwen3-moe-megatron-fp8", False)],
)
def test_flash_attn_is_expected_only_where_the_trainer_asks_for_it(spec, listed, tmp_path):
    """flash_attention_2 (verl's default on both trainers) needs flash-attn on the node: FSDP's Hugging Face model
    (qwen3-8b) and Megatron's attention_backend flash, which TransformerEngine serves with flash-attn (qwen3-30b);
    training.attention sdpa (the tiny FSDP spec) or fused (TE's cuDNN attention, the tiny MoE spec) does not."""
    from tests.conftest import SPECS

    found = json.loads((compile_bundle(SPECS / f"{spec}.yaml", tmp_path) / "preflight.json").read_text())
    assert ("flash-attn" in {p["name"] for p in found["packages"]}) is listed


def test_versions_and_env(pf, expected, checks):
    assert checks.same_version("0.24.0", "0.24.0") and checks.same_version("0.24.0+cu129", "0.24.0")
    assert not checks.same_version("0.24.1", "0.24.0") and not checks.same_version(None, "0.24.0")
    assert not checks.same_version("0.24.0rc1", "0.24.0")
    assert checks.same_version("2.8.3", ">=2.3.3") and checks.same_version("2.3.3+cu12torch2.8", ">=2.3.3")
    assert checks.same_version("3.0.0b1", ">=2.3.3") and checks.same_version("2.10.0", ">=2.3.3")
    assert not checks.same_version("2.3.2", ">=2.3.3") and not checks.same_version(None, ">=2.3.3")
    packages = dict(h200_facts(expected)["packages"], vllm={"distribution": None, "version": None})
    rows = {r["check"]: r for r in checks.check_node(expected, h200_facts(expected, packages=packages), False)}
    assert rows["pkg vllm"]["status"] == "FAIL" and rows["pkg vllm"]["found"] == "not installed"
    # the first H200 RL attempt's failure (docs/results.md#rl-runs), caught on the node before training starts
    for version, status in ((None, "FAIL"), ("2.1.0", "FAIL"), ("2.8.3", "PASS")):
        packages = dict(h200_facts(expected)["packages"], **{"flash-attn": {"distribution": "flash_attn",
                                                                           "version": version}})
        row = {r["check"]: r for r in checks.check_node(expected, h200_facts(expected, packages=packages), False)}
        assert row["pkg flash-attn"]["status"] == status and row["pkg flash-attn"]["expected"] == ">=2.3.3"
    env = dict(expected["env"], VLLM_USE_DEEP_GEMM_E8M0="1")
    env.pop("FP8SPEC_RUNTIME_PATCHES")
    rows = {r["check"]: r for r in checks.check_node(expected, h200_facts(expected, env=env), False)}
    assert rows["env VLLM_USE_DEEP_GEMM_E8M0"]["status"] == "FAIL"
    assert rows["env FP8SPEC_RUNTIME_PATCHES"]["found"] == "(unset)"
    assert rows["env FP8SPEC_RUNTIME_PATCHES"]["status"] == "FAIL"


def write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151936}


def test_model_config_check(pf, expected, tmp_path, checks):
    def row(path):
        model = dict(expected["model"], path=str(path))
        return checks._model_row(model, pf._model_facts(model))

    assert row(write_config(tmp_path / "good", QWEN3_8B))["status"] == "PASS"
    wrong = row(write_config(tmp_path / "wrong", dict(QWEN3_8B, num_hidden_layers=28, vocab_size=32000)))
    assert wrong["status"] == "FAIL" and "differs: num_hidden_layers, vocab_size" in wrong["found"]
    moe = row(write_config(tmp_path / "moe", dict(QWEN3_8B, num_experts=128)))
    assert moe["status"] == "FAIL" and "num_experts" in moe["found"]
    nested = row(write_config(tmp_path / "vl", {"model_type": "wrapper", "text_config": QWEN3_8B}))
    assert nested["status"] == "PASS"
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    assert row(tmp_path / "broken")["status"] == "FAIL"
    # a missing folder is a failure (the launch would die loading it), unless the spec says it is a hub id
    absent = row(tmp_path / "absent")
    assert absent["status"] == "FAIL" and "is not a folder on this node" in absent["found"]
    assert row("Qwen/Qwen3-8B-Base")["status"] == "FAIL"
    hub = dict(expected["model"], path="Qwen/Qwen3-8B-Base", from_hub=True)
    hub_row = checks._model_row(hub, pf._model_facts(hub))
    assert hub_row["status"] == "SKIP" and "hub id" in hub_row["found"]
    (tmp_path / "no-config").mkdir()
    assert row(tmp_path / "no-config")["status"] == "FAIL"


def test_data_files_are_checked(pf, expected, tmp_path, checks):
    present = tmp_path / "train.parquet"
    present.write_bytes(b"PAR1")
    (tmp_path / "dir.parquet").mkdir()
    files = [str(present), str(tmp_path / "missing.parquet"), str(tmp_path / "dir.parquet"), "hdfs://nn/x.parquet"]
    want = dict(expected, data={"files": files})
    facts = h200_facts(want, data=pf.node_facts(want, skip_gpu=True)["data"])
    rows = {r["check"]: r for r in checks.check_node(want, facts, skip_gpu=False)}
    assert rows[f"data {present}"]["status"] == "PASS" and rows[f"data {present}"]["found"] == "4 bytes"
    assert rows[f"data {tmp_path / 'missing.parquet'}"]["status"] == "FAIL"
    assert rows[f"data {tmp_path / 'dir.parquet'}"]["found"] == "a folder, not a file"
    assert rows["data hdfs://nn/x.parquet"]["status"] == "SKIP"


def test_runtime_patch_set_check(pf, expected, tmp_path, checks):
    """The workers must import exactly the shipped file set: the bundle's lib/ passes, a changed file, an extra
    file or a missing package fails, naming the files."""
    import shutil

    from fp8spec.patchset import shipped_files

    lib = tmp_path / "lib"
    for path, text in shipped_files().items():
        (lib / path).parent.mkdir(parents=True, exist_ok=True)
        (lib / path).write_text(text, encoding="utf-8")
    files = pf.runtime_fileset(str(lib / "fp8spec"))
    assert files == expected["runtime"]["files"] and pf.fileset_digest(files) == expected["runtime"]["sha256"]
    seen = {"path": str(lib / "fp8spec"), "files": files, "sha256": pf.fileset_digest(files)}
    assert checks._runtime_row(expected["runtime"], seen)["status"] == "PASS"
    (lib / "fp8spec/runtime/quantization/blockquant.py").write_text("# changed\n")
    (lib / "fp8spec/runtime/extra.py").write_text("")
    files = pf.runtime_fileset(str(lib / "fp8spec"))
    bad = checks._runtime_row(expected["runtime"], {"path": "x", "files": files, "sha256": pf.fileset_digest(files)})
    assert bad["status"] == "FAIL"
    assert "differs: fp8spec/runtime/extra.py, fp8spec/runtime/quantization/blockquant.py" in bad["found"]
    shutil.rmtree(lib)
    missing = checks._runtime_row(expected["runtime"], {"error": "fp8spec is not importable here"})
    assert missing["status"] == "FAIL" and missing["found"] == "fp8spec is not importable here"


def test_cluster_rows(pf, expected, checks):
    assert checks.check_cluster(dict(expected, hardware=dict(expected["hardware"], nodes=2)), 2, False, False)[0][
        "status"] == "PASS"
    assert checks.check_cluster(dict(expected, hardware=dict(expected["hardware"], nodes=2)), 1, False, False)[0][
        "status"] == "FAIL"
    assert checks.check_cluster(expected, 0, True, False)[0]["status"] == "SKIP"
    assert checks.check_cluster(expected, 1, False, True)[0]["status"] == "SKIP"


def test_ray_cpu_need_comes_from_the_verl_profile(expected):
    from fp8spec.profiles import load_profile

    verl = load_profile("verl", "0.9.1")
    assert expected["ray_cpus"] == {"verl": "0.9.1",
                                    "before_gpus": verl.value("requirement.ray_cpus_before_gpus"),
                                    "per_gpu": verl.value("requirement.ray_cpus_per_gpu")}


def test_ray_cpu_shortage(cpus, expected):
    pf = cpus
    need = expected["ray_cpus"]  # 9 before the GPUs, 3 per GPU; this bundle runs on 1 GPU
    before, per_gpu = need["before_gpus"], need["per_gpu"]
    # a cluster without the run's GPUs: verl stops itself at its GPU check, so only the CPU-only actors count
    assert pf.ray_cpu_shortage(need, before, 0, 1) is None
    short = pf.ray_cpu_shortage(need, 2, 0, 1)
    assert short.startswith("the Ray cluster offers 2 logical CPUs; verl 0.9.1's main_ppo needs 9 (9 for its")
    assert "--num-cpus=9" in short and "\n" not in short
    # with its GPUs, every GPU's placement-group bundle takes per_gpu more (16 GPUs: 9 + 48)
    assert pf.ray_cpu_shortage(need, before + 16 * per_gpu, 16, 16) is None
    short = pf.ray_cpu_shortage(need, before + 16 * per_gpu - 1, 16, 16)
    assert f"needs {before + 16 * per_gpu} (" in short and "3 per GPU for its 16 GPU" in short
    assert pf.ray_cpu_shortage(None, 0, 0, 1) is None  # a preflight.json without the fact checks nothing


# --- the program as a process ----------------------------------------------------------------------


def run_program(bundle: Path, *args: str, env_extra: dict | None = None, block_fp8spec: bool = True):
    """Run the bundle's preflight.py. With block_fp8spec, the fp8spec installed in this environment cannot be
    imported (a meta-path finder refuses every fp8spec module not under the bundle's lib/): what preflight.py
    finds is only the bundle's own copy, as on a node where nothing was installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FP8SPEC_", "VLLM_", "VERL_", "WANDB_"))}
    # the bundle's lib/ (the shipped patch set, as Ray's py_modules puts it first), and the bundle folder
    # itself for the stand-in distributions planted there
    env["PYTHONPATH"] = os.pathsep.join([str(bundle / "lib"), str(bundle)])
    env.update(env_extra or {})
    code = "import sys, runpy\n"
    if block_fp8spec:
        code += ("class Block:\n"
                 "    def find_spec(self, name, path=None, target=None):\n"
                 "        import importlib.machinery as m\n"
                 "        if name.split('.')[0] != 'fp8spec': return None\n"
                 f"        spec = m.PathFinder.find_spec(name, path, target)\n"
                 f"        if spec is None or not str(spec.origin).startswith({str(bundle / 'lib')!r}):\n"
                 "            raise ImportError('fp8spec outside the bundle is blocked: ' + name)\n"
                 "        return spec\n"
                 "sys.meta_path.insert(0, Block())\n")
    code += "sys.argv = [sys.argv[1], *sys.argv[2:]]; runpy.run_path(sys.argv[0], run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, str(bundle / "preflight.py"), *args], cwd="/",
                          env=env, capture_output=True, text=True, timeout=120)


def test_program_imports_only_stdlib_torch_and_ray():
    tree = ast.parse(PROGRAM.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    third_party = modules - set(sys.stdlib_module_names)
    # the CPU check and the checks, shipped beside it
    assert third_party == {"torch", "ray", "preflight_cpus", "preflight_checks"}, third_party
    for name, allowed in (("preflight_cpus.py", {"ray"}), ("preflight_checks.py", set())):
        beside = ast.parse(PROGRAM.with_name(name).read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(beside) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(beside)
                     if isinstance(n, ast.ImportFrom) and n.level == 0}
        assert imported - set(sys.stdlib_module_names) == allowed, name


def test_local_mode_on_this_cpu_machine(h200_bundle, tmp_path):
    from tests.launchers.test_ray_preflight import plant_distribution

    bundle = tmp_path / "b"
    import shutil

    shutil.copytree(h200_bundle, bundle)
    plant_distribution(bundle, "vllm", "0.24.0")
    plant_distribution(bundle, "flash_attn", "2.3.3")
    env = json.loads((bundle / "preflight.json").read_text())["env"]
    printed = run_program(bundle, "--print-env")
    assert printed.returncode == 0, printed.stderr
    shown = subprocess.run(["bash", "-c", printed.stdout + "\nenv"], capture_output=True, text=True).stdout
    for name, value in env.items():
        assert f"{name}={value}\n" in shown

    # the model folder and the data file the bundle names, made here (paths from preflight.json)
    expected = json.loads((bundle / "preflight.json").read_text())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    from fp8spec.catalog._store import load_entry

    (model_dir / "config.json").write_text(json.dumps(load_entry(expected["model"]["name"])["config"]))
    data = tmp_path / "train.parquet"
    data.write_bytes(b"PAR1")
    expected["model"]["path"], expected["data"]["files"] = str(model_dir), [str(data)]
    (bundle / "preflight.json").write_text(json.dumps(expected))

    # dry run: GPU facts reported as a CPU node's, not judged; everything else passes -> exit 0
    dry = run_program(bundle, "--local", "--skip-gpu-checks", env_extra=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "PREFLIGHT PASSED" in dry.stdout and "no CUDA device" in dry.stdout
    # the runtime patch set was found in the bundle's lib/ and is the shipped file set
    runtime_line = next(line for line in dry.stdout.splitlines() if "runtime fp8spec.runtime" in line)
    assert f"at {bundle / 'lib' / 'fp8spec'}" in runtime_line and runtime_line.rstrip().endswith("PASS")
    # the real check on a machine without a GPU: exit 1, naming the GPU rows
    real = run_program(bundle, "--local", env_extra=env)
    assert real.returncode == 1, real.stdout + real.stderr
    assert "gpu expected 'H200 (compute capability 9.0)', found 'no CUDA device" in real.stdout
    assert "torch cuda expected '13.0'" in real.stdout
    # from a plain shell, without `eval "$(python3 preflight.py --print-env)"`: --local applies the bundle's
    # environment as runtime_env.yaml gives it to the workers, so the env rows and the patch set still pass
    bare = run_program(bundle, "--local", "--skip-gpu-checks")
    assert bare.returncode == 0, bare.stdout + bare.stderr
    for name, value in env.items():
        row = next(line for line in bare.stdout.splitlines() if f"env {name} " in line)
        assert value in row and row.rstrip().endswith("PASS")


def test_bad_expected_file_is_exit_2(h200_bundle, tmp_path):
    missing = run_program(h200_bundle, "--local", "--expected", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    (tmp_path / "x.json").write_text('{"format": 99}')
    wrong = run_program(h200_bundle, "--local", "--expected", str(tmp_path / "x.json"))
    assert wrong.returncode == 2 and "format 2" in wrong.stderr
