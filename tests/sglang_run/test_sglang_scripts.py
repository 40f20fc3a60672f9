"""The SGLang benchmark scripts (benchmarks/sglang/, benchmarks/offline/) checked on CPU against what can be checked here.

* Every ``sglang.Engine`` keyword the benches and probes pass is a ``ServerArgs`` field of SGLang 0.5.12 (the
  committed snapshot backends/snapshots/sglang-0.5.12.json, extracted from the release wheel).
* The FP8 quantization config the benches inject is verl 0.9.1's own ``build_sglang_fp8_quant_config`` output
  (verl is installed in the test environment), and the engine arguments mirror verl's SGLang server arguments.
* The log parser reads lines formatted with SGLang's own f-strings (the templates are copied below from the
  0.5.12 sources; a changed pattern fails here, not on the GPU).
* offline_set.txt: one version per package in each folder the device installs, and the pins the sglang set
  replaces are exactly the ones run_h200_sglang.sh hides from the SGLang view.
* import_closure.py classifies hard, conditional, soft and lazy imports on a small synthetic site.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, require, skip_missing_extra

SGL = REPO / "benchmarks" / "sglang"
OFFLINE = REPO / "benchmarks" / "offline"
SNAPSHOT = REPO / "backends" / "snapshots" / "sglang-0.5.12.json"


def _load(module: str):
    return importlib.import_module(f"benchmarks.{module}")


@pytest.fixture(scope="module")
def common():
    return _load("sglang.sglang_common")


def _server_args_fields() -> set[str]:
    return set(json.loads(SNAPSHOT.read_text())["data"]["fields"]["ServerArgs"])


@pytest.mark.parametrize("mode", ["bf16", "fp8", "fp8kv"])
def test_engine_kwargs_are_server_args_fields(common, mode):
    kw = common.engine_kwargs("/m", mode, 0.6, 4096, cuda_graph_max_bs=8, disable_radix_cache=True,
                              custom_weight_loader=["a.b"])
    unknown = set(kw) - _server_args_fields()
    assert not unknown, f"not ServerArgs fields of SGLang 0.5.12: {sorted(unknown)}"
    assert kw["attention_backend"] == "flashinfer" and kw["enable_memory_saver"] is True
    assert ("quantization" in kw) == (mode != "bf16")
    assert kw.get("kv_cache_dtype") == ("fp8_e4m3" if mode == "fp8kv" else None)


def test_probe_engine_arguments_are_server_args_fields():
    """The probes' direct sglang.Engine(...) calls name only ServerArgs fields (read from their source)."""
    import ast

    fields = _server_args_fields()
    for script in ("kv_scales_probe_sglang.py", "weight_sync_probe_sglang.py", "bench_sglang_rollout.py"):
        tree = ast.parse((SGL / script).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "sglang.Engine":
                names = {k.arg for k in node.keywords if k.arg}
                assert names <= fields, (script, sorted(names - fields))
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "kw.update":
                names = {k.arg for k in node.keywords if k.arg}
                assert names <= fields, (script, sorted(names - fields))


def test_fp8_config_is_verls_own(common):
    require("verl")
    from verl.utils.sglang.sglang_fp8_utils import build_sglang_fp8_quant_config

    assert common.verl_sglang_fp8_config() == build_sglang_fp8_quant_config({"quantization_config": None})


def test_engine_kwargs_mirror_verls_server_arguments(common):
    """The constant arguments verl's SGLangHttpServer passes (read from its source) are the benches' too."""
    import ast

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)")
    server = Path(list(spec.submodule_search_locations)[0]) / "workers/rollout/sglang_rollout/async_sglang_server.py"
    tree = ast.parse(server.read_text())  # read, not imported: importing it needs sglang
    args = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "args" for t in n.targets) and isinstance(n.value, ast.Dict))
    constants = {k.value: v.value for k, v in zip(args.keys, args.values)
                 if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    assert constants == {"enable_memory_saver": True, "gpu_id_step": 1, "log_level": "error",
                         "skip_server_warmup": True}
    kw = common.engine_kwargs("/m", "fp8", 0.6)
    assert kw["enable_memory_saver"] is True and kw["skip_server_warmup"] is True
    assert kw["log_level"] == "info"  # the one deliberate difference: the benches read SGLang's log


SGLANG_LINES = [  # SGLang 0.5.12's own f-strings, formatted (file:line in sglang_common._LOG_FACTS)
    "Init torch distributed ends. elapsed=1.23 s, mem usage=0.61 GB",
    "Load weight begin. avail mem=138.72 GB",
    "Load weight end. elapsed=3.10 s, type=Qwen3ForCausalLM, quant=fp8, avail mem=129.86 GB, mem usage=8.86 GB.",
    "KV Cache is allocated. #tokens: 544512, K size: 37.41 GB, V size: 37.41 GB",
    "Memory pool end. avail mem=54.02 GB",
    "max_total_num_tokens=544512, chunked_prefill_size=16384, max_prefill_tokens=16384, max_running_requests=256, "
    "context_len=4096, available_gpu_mem=54.02 GB",
    "Capture cuda graph end. Time elapsed: 12.34 s. mem usage=1.05 GB. avail mem=52.97 GB.",
    "server_args=ServerArgs(model_path='/m', attention_backend='flashinfer', sampling_backend='flashinfer', "
    "mem_fraction_static=0.6)",
    "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 4096, "
    "#new_token_ratio: 0.5000 -> 0.6000",
    "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 1024, "
    "#new_token_ratio: 0.6000 -> 0.7000",
]


def test_parse_log_reads_sglangs_lines(common):
    f = common.parse_log("\n".join(SGLANG_LINES))
    assert f["init_dist_mem_gib"] == 0.61 and f["free_before_load_gib"] == 138.72
    assert f["free_after_load_gib"] == 129.86 and f["weights_gib"] == 8.86
    assert f["kv_pool_tokens"] == 544512 and f["k_size_gib"] == 37.41 and f["v_size_gib"] == 37.41
    assert f["max_total_num_tokens"] == 544512 and f["max_running_requests"] == 256 and f["context_len"] == 4096
    assert f["graph_capture_s"] == 12.34 and f["graph_mem_gib"] == 1.05 and f["free_after_pool_gib"] == 54.02
    assert f["attention_backend"] == "flashinfer" and f["sampling_backend"] == "flashinfer"
    assert f["retractions"] == 5 and f["retraction_events"] == 2 and f["deep_gemm_precompile"] is False


def _offline_set(sets: str, without: str = ""):
    mod = _load("offline.build_offline_set")
    return mod.OfflineSet(OFFLINE / "offline_set.txt", set(sets.split(",")),
                          [w for w in without.split(",") if w])


def _names(wheels: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for w in wheels:
        name, version = w.split("==")
        out.setdefault(name.lower().replace("_", "-"), []).append(version)
    return out


RL_WITHOUT = "vllm,xgrammar,llguidance,openai-harmony,openai==2.54.0,apache-tvm-ffi==0.1.11"


@pytest.mark.parametrize("sets,without", [("engine,verl", ""), ("sglang", ""), ("megatron", ""),
                                          ("engine,verl,sglang", RL_WITHOUT)])
def test_one_version_per_package_in_each_install_folder(sets, without):
    names = _names(_offline_set(sets, without).wheels)
    assert {n: v for n, v in names.items() if len(v) > 1} == {}


def test_sglang_pins_shadow_exactly_what_the_view_hides():
    engine = _names(_offline_set("engine,verl").wheels)
    sglang = _names(_offline_set("sglang").wheels)
    shared = {n for n in sglang if n in engine}
    assert shared == {"apache-tvm-ffi", "openai"}, shared
    script = (OFFLINE / "run_h200_sglang.sh").read_text()
    for hidden in ("vllm|vllm-*", "xgrammar|xgrammar-*", "llguidance|llguidance-*", "openai_harmony|openai_harmony-*",
                   "openai|openai-*", "tvm_ffi|apache_tvm_ffi-*"):
        assert hidden in script, hidden
    # the one-archive build leaves out exactly vLLM, the packages the view hides and the replaced pins
    assert RL_WITHOUT in (OFFLINE / "README.md").read_text()


def test_split_globs_leave_the_sglang_set_and_join_their_own():
    plain = _offline_set("sglang")
    both = _offline_set("sglang,sglang-fa3")
    assert "sgl_kernel/flash_ops.abi3.so" in plain.excluded()
    assert "sgl_kernel/flash_ops.abi3.so" not in both.excluded()
    assert both.wanted_splits() == ["sgl_kernel/flash_ops.abi3.so"]
    assert plain.debs == [("libnuma1==2.0.16-1", "usr/lib/x86_64-linux-gnu/libnuma.so.1")]


def test_without_refuses_a_name_not_in_the_sets():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.offline.build_offline_set", "--sets", "sglang",
                           "--without", "vllm", "--unpack", "/nonexistent-never-written"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode != 0 and "--without vllm: no such wheel" in proc.stderr


def test_import_closure_classifies_imports(tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text(
        "import hardext\n"
        "from pkg import sub\n"
        "try:\n    import softext\nexcept ImportError:\n    softext = None\n"
        "if is_hip():\n    import hipext\n"
        "if unknown_flag:\n    import condext\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import typingext\n"
        "def f():\n    import lazyext\n")
    (site / "pkg" / "sub.py").write_text("import subext\n")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.sglang.import_closure", "--site", str(site), "pkg",
                           "--lazy-in", "pkg"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    sections = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("## "):
            current = line
            sections[current] = set()
        elif current and line.strip():
            sections[current].add(line.split("\t")[0])
    by = {k.split(" (")[0].split(" outside")[0].replace("## ", ""): v for k, v in sections.items()}
    assert by["hard imports"] == {"hardext", "subext"}
    assert by["conditional imports"] == {"condext"}
    assert by["soft imports"] == {"softext"}
    assert by["lazy imports"] == {"lazyext"}
    assert "hipext" not in proc.stdout and "typingext" not in proc.stdout
