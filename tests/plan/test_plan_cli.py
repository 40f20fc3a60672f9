"""`fp8spec plan`: every example, a user's config.json model, JSON with units, the PNG, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, DEEPSEEK_E2E, EXAMPLE_SPECS, REPO, patched
from tests.specfile.test_bad_inputs import run_cli


def _numbers_without_units(node, path="") -> list[str]:
    """Paths of numbers that are not the 'value' of a {value, unit} pair."""
    bad = []
    if isinstance(node, dict):
        if "value" in node and "unit" in node:
            return [] if isinstance(node["value"], (int, float)) else [path]
        for key, value in node.items():
            if key == "format":
                continue
            bad += _numbers_without_units(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            bad += _numbers_without_units(value, f"{path}[{i}]")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        bad.append(path)
    return bad


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=lambda p: p.name)
def test_plan_every_example(spec):
    text = run_cli_here("plan", str(spec))
    assert text.returncode == 0, text.stdout + text.stderr
    for row in ("weights", "available KV memory", "KV capacity", "expected rollout speed-up", "Trainer:",
                "kept during rollout"):
        assert row in text.stdout
    proc = run_cli_here("plan", str(spec), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert not _numbers_without_units(data)
    choices = [r["choice"] for r in data["rollout"]]
    assert choices[:3] == ["bf16", "fp8", "fp8_kv"] and sum(r["spec_choice"] for r in data["rollout"]) == 1
    for r in data["rollout"]:
        kv = r["kv_cache"]
        assert kv["bytes_per_token"]["value"] == kv["bytes_per_token_per_layer"]["value"] * kv["layers"]["value"]


def test_kv_bytes_per_token_exact_in_json():
    data = json.loads(run_cli_here("plan", str(REPO / "specs" / "qwen3-8b.yaml"), "-f", "json").stdout)
    per_token = {r["choice"]: r["kv_cache"]["bytes_per_token"] for r in data["rollout"]}
    # Qwen3-8B at rollout TP 2: 36 layers x K,V x 4 KV heads x 128 x 2 bytes (bf16) or 1 byte (fp8)
    assert per_token["bf16"] == {"value": 36 * 2 * 4 * 128 * 2, "unit": "bytes", "status": "exact"}
    assert per_token["fp8_kv"]["value"] == 36 * 2 * 4 * 128


def test_plan_overrides_and_llm_class_configuration():
    spec = REPO / "specs" / "qwen3-8b.yaml"
    data = json.loads(run_cli_here("plan", str(spec), "-f", "json", "--tp", "1", "--max-model-len", "8192",
                              "--max-num-batched-tokens", "16384", "--max-num-seqs", "1024",
                              "--gpu-memory-utilization", "0.5", "--no-cuda-graphs").stdout)
    engine = data["engine"]
    assert engine["tp"]["value"] == 1 and engine["max_model_len"]["value"] == 8192
    assert engine["max_num_seqs"]["value"] == 1024 and engine["cuda_graphs"] is False
    bf16 = data["rollout"][0]["memory"]
    assert bf16["requested"]["value"] == -(-81089 * 2**20 // 2)  # ceil(total x 0.5) on an H100


def test_plan_of_a_users_config_json(tmp_path, write_spec):
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
              "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
              "num_hidden_layers": 28, "vocab_size": 151936, "tie_word_embeddings": True,
              "max_position_embeddings": 40960}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = write_spec(patched(BASE_SPEC, {"model": {"name": "me/my-0.6b", "config_path": str(path)}}))
    proc = run_cli_here("plan", str(spec), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["model"] == "me/my-0.6b"
    assert data["rollout"][0]["kv_cache"]["bytes_per_token"]["value"] == 28 * 2 * 4 * 128 * 2  # TP 2: 4 heads


def test_png_is_written_and_byte_identical_across_processes(tmp_path):
    spec = str(REPO / "specs" / "qwen3-30b.yaml")
    for out in ("a", "b"):  # two real processes: nothing (hash seed, font cache) may leak into the bytes
        proc = run_cli("plan", spec, "-o", str(tmp_path / out))
        assert proc.returncode == 0, proc.stderr
    a, b = (tmp_path / "a" / "plan.png").read_bytes(), (tmp_path / "b" / "plan.png").read_bytes()
    assert a.startswith(b"\x89PNG\r\n\x1a\n") and len(a) > 10_000
    assert a == b
    assert (tmp_path / "a" / "plan.svg").read_bytes() == (tmp_path / "b" / "plan.svg").read_bytes()
    assert b"matplotlib" not in a  # no matplotlib version stamp: the Software entry is fp8spec's fixed mark
    assert b"tEXtSoftware\x00fp8spec plan" in a


def test_matplotlib_is_imported_only_for_the_png():
    code = ("import sys\nfrom fp8spec.cli import app\n"
            f"app(['plan', {str(REPO / 'specs' / 'qwen3-8b.yaml')!r}], standalone_mode=False)\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_infeasible_spec_prints_the_plan_exits_1_and_writes_nothing(tmp_path, write_spec):
    spec = write_spec(patched(BASE_SPEC, DEEPSEEK_E2E))
    proc = run_cli_here("plan", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert "MEM001" in proc.stdout and "trainer state per GPU" in proc.stdout
    assert "error MEM001" in proc.stderr and "nothing written" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_gpu_memory_is_bad_input_until_given(write_spec):
    spec = write_spec(patched(BASE_SPEC, {"hardware": {"gpu": "h800"}}))
    proc = run_cli_here("plan", str(spec))
    assert proc.returncode == 2 and "--gpu-memory-gib" in proc.stderr and "Traceback" not in proc.stderr
    assert run_cli_here("plan", str(spec), "--gpu-memory-gib", "79.2").returncode == 0


def test_bad_usage_and_bad_specs_exit_2_or_1(tmp_path):
    spec = str(REPO / "specs" / "qwen3-8b.yaml")
    assert run_cli_here("plan", spec, "--format", "yaml").returncode == 2
    assert run_cli_here("plan", spec, "--gpu-memory-utilization", "1.5").returncode == 2
    assert run_cli_here("plan", str(tmp_path / "missing.yaml")).returncode == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\n")
    proc = run_cli_here("plan", str(bad))
    assert proc.returncode == 1 and "no plan" in proc.stderr and "Traceback" not in proc.stderr
