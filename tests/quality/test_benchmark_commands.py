"""Every benchmark is a plain command: a module of the ``benchmarks`` package, run from the repository root with
``python -m benchmarks.<topic>.<script>``, that parses its arguments with argparse (so ``--help`` works) and never
edits ``sys.path``; the offline step scripts (benchmarks/offline/) call those same commands; and the driver the vLLM
and SGLang configuration runners share records each configuration and keeps to its time budget."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BENCH = REPO / "benchmarks"
# results/ is data
LEFT_OUT = ("results",)


def _scripts() -> list[Path]:
    return [p for p in sorted(BENCH.rglob("*.py")) if p.relative_to(BENCH).parts[0] not in LEFT_OUT]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _commands() -> list[Path]:
    return [p for p in _scripts() if '__name__ == "__main__"' in p.read_text(encoding="utf-8")]


def test_no_benchmark_edits_sys_path():
    edits = []
    for path in _scripts():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "path"
                    and getattr(node.func.value.value, "id", None) == "sys"):
                edits.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert edits == []


def test_every_folder_of_scripts_is_a_package():
    folders = {p.parent for p in _scripts()}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_every_command_parses_its_arguments_with_argparse():
    """Directly, or through the configurations runners' shared command line (benchmarks/common/configs.py)."""
    assert len(_commands()) > 20
    bare = [str(p.relative_to(REPO)) for p in _commands()
            if not any(call in p.read_text(encoding="utf-8") for call in ("ArgumentParser(", "configs.main("))]
    assert bare == []


@pytest.mark.parametrize("module", ["benchmarks.engine.run_configs", "benchmarks.sglang.run_sglang_configs",
                                    "benchmarks.engine.bench_rollout", "benchmarks.offline.build_offline_set",
                                    "benchmarks.engine.weight_sync_probe", "benchmarks.rl_real.summarize_real",
                                    "benchmarks.megatron.bench_te_layout"])
def test_a_command_answers_help_from_the_repository_root(module):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # what `python -m` finds from the root alone
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ")


def test_step_scripts_call_the_plain_commands():
    steps = sorted((BENCH / "offline").glob("*.sh")) + [BENCH / "rl_run" / "lanes.sh"]
    modules = {_module(p) for p in _scripts()}
    for script in steps:
        text = script.read_text(encoding="utf-8")
        assert not re.search(r"python3? benchmarks/\S+\.py", text), script.name  # a file path, not the module
        for called in re.findall(r"python3? -m (benchmarks\.[\w.]+)", text):
            assert called in modules, (script.name, called)
        for path in re.findall(r"\bbenchmarks/[\w/.-]+\.(?:sh|txt|py)\b", text):
            assert (REPO / path).is_file(), (script.name, path)


_FAKE_BENCH = """
import json, sys
print("engine log: hello")
json.dump({"bench": "ran", "args": sys.argv[1:-2]}, open(sys.argv[-1], "w"))
"""


def _configs(n: int):
    from benchmarks.common.configs import Config

    return [Config(f"c{i}", [sys.executable, "-c", _FAKE_BENCH, str(i)], dict(os.environ), {"fallback": True})
            for i in range(n)]


def _parse_log(text: str) -> dict:
    return {"said_hello": "hello" in text}


def test_the_configs_driver_merges_the_bench_record_with_the_log_facts(tmp_path):
    from benchmarks.common.configs import run_configs

    rows = run_configs(tmp_path, None, _configs(2), _parse_log, lambda rec: "", 100, "driver")
    assert [r["name"] for r in rows] == ["c0", "c1"]
    assert all(r["rc"] == 0 and r["bench"] == "ran" and r["said_hello"] for r in rows)
    assert rows[1]["args"] == ["1"]
    lines = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["c0", "c1"]
    assert (tmp_path / "c0.log").read_text(encoding="utf-8").startswith("engine log: hello")


def test_the_configs_driver_starts_nothing_it_has_no_time_for(tmp_path, capsys):
    from benchmarks.common.configs import run_configs

    assert run_configs(tmp_path, 30, _configs(2), _parse_log, lambda rec: "", 100, "driver") == []
    assert "c0 and later not run" in capsys.readouterr().out


def test_a_failed_bench_keeps_its_fallback_record_and_log_tail(tmp_path):
    from benchmarks.common.configs import Config, run_configs

    broken = Config("broken", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], dict(os.environ),
                    {"model": "m"})
    (row,) = run_configs(tmp_path, None, [broken], _parse_log, lambda rec: "", 100, "driver")
    assert row["rc"] == 3 and row["model"] == "m" and "boom" in row["error_tail"]
