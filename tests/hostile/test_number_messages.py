"""Messages about numbers and bytes say what is wrong, where: NaN is "not a number" (not "should be <= 1"), an
infinite value is infinite, a number Python will not convert is "too many digits" (not Python's own advice to
raise its limit), and a NUL byte in the reward file has a line."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import SPECS

BOUNDED_FLOATS = [  # (field as written in the example spec, its line text)
    "gpu_memory_utilization: 0.4",
]


@pytest.fixture
def folder(tmp_path):
    shutil.copytree(SPECS, tmp_path / "s")
    return tmp_path / "s"


def _spec(folder, old: str, new: str, name="t.yaml"):
    text = (folder / "tiny-qwen3-h200.yaml").read_text()
    assert old in text
    (folder / name).write_text(text.replace(old, new, 1))
    return folder / name


@pytest.mark.parametrize("written, says", [
    (".nan", "is not a number"), (".NaN", "is not a number"), (".inf", "is infinite"), ("-.inf", "is infinite"),
])
@pytest.mark.parametrize("field", ["rollout.gpu_memory_utilization", "correction.clip"])
def test_nan_and_inf_in_a_bounded_float_say_what_they_are(folder, written, says, field):
    section, key = field.split(".")
    text = (folder / "tiny-qwen3-h200.yaml").read_text()
    if f"\n  {key}:" in text:
        start = text.index(f"\n  {key}:") + 1
        end = text.index("\n", start)
        text = text[:start] + f"  {key}: {written}" + text[end:]
    else:
        text = text.replace(f"\n{section}:\n", f"\n{section}:\n  {key}: {written}\n", 1)
    (folder / "t.yaml").write_text(text)
    proc = run_cli_here("validate", str(folder / "t.yaml"))
    assert proc.returncode == 1
    line = next(ln for ln in proc.stdout.splitlines() if field in ln)
    assert f"{field}: {says}" in line and "less than" not in line and "greater than" not in line, line


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan"])
@pytest.mark.parametrize("option", ["--gpu-memory-utilization", "--gpu-memory-gib"])
def test_plan_float_options_name_nan(folder, option, value):
    proc = run_cli_here("plan", str(folder / "tiny-qwen3-h200.yaml"), option, value)
    assert proc.returncode == 2 and "is not a number" in proc.stderr and "less than" not in proc.stderr


def test_nul_byte_in_the_reward_file_is_located_at_its_line(folder):
    (folder / "rewards" / "tiny_arith.py").write_bytes(b"def compute_score(*a):\n    return 0\n# \x00\n")
    proc = run_cli_here("validate", str(folder / "tiny-qwen3-h200.yaml"))
    assert proc.returncode == 1
    assert f"{folder / 'rewards' / 'tiny_arith.py'}:3: a NUL byte" in proc.stdout and ":None:" not in proc.stdout


def test_huge_integer_literal_in_the_reward_file(folder):
    (folder / "rewards" / "tiny_arith.py").write_text("def compute_score(*a):\n    return " + "1" * 5000 + "\n")
    proc = run_cli_here("validate", str(folder / "tiny-qwen3-h200.yaml"))
    assert proc.returncode == 1
    assert f"{folder / 'rewards' / 'tiny_arith.py'}:2:" in proc.stdout and "4300-digit limit" in proc.stdout
    assert "set_int_max_str_digits" not in proc.stdout


@pytest.mark.parametrize("digits", [101, 5000, 50000])
def test_huge_integer_in_config_json_is_located_and_named(folder, digits):
    config = folder / "models" / "tiny-qwen3" / "config.json"
    data = json.loads(config.read_text())
    text = json.dumps(data, indent=2).replace(
        f'"num_hidden_layers": {data["num_hidden_layers"]}', '"num_hidden_layers": ' + "7" * digits)
    config.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "num_hidden_layers" in ln)
    col = text.splitlines()[line - 1].index("7" * 20) + 1
    for args in (("validate", str(folder / "tiny-qwen3-h200.yaml")),
                 ("init", "--config-path", str(config.parent), "--gpu", "h200", "--gpus-per-node", "1")):
        proc = run_cli_here(*args, cwd=folder)
        out = proc.stdout + proc.stderr
        assert proc.returncode in (1, 2) and "internal error" not in out
        assert f"{config}:{line}:{col}: a number with {digits} digits" in out, out
        assert "set_int_max_str_digits" not in out


def test_huge_integer_in_a_snapshot_file(tmp_path):
    path = tmp_path / "vllm-0.33.0.json"
    path.write_text('{"package": ' + "1" * 5000 + "}")
    for args in (("backends", "verify", str(path)), ("backends", "check", "--snapshots", str(tmp_path))):
        proc = run_cli_here(*args)
        assert proc.returncode == 2, proc.stderr
        assert f"{path}: not a snapshot: a number with 5000 digits" in proc.stderr
