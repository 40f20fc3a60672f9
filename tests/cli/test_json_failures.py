"""`--format json` is a property of the command line: every command that has a --format option prints exactly one
JSON document on stdout, whatever fails (a missing or malformed spec, a schema error, an unknown model, a
config.json that cannot be used, a bad option or value, an unknown backend, pictures that cannot be written),
with the documented exit code. The set of such commands is read from the command tree, so a new command with
--format is held to this as soon as it exists."""

from __future__ import annotations

import importlib.util
import json

import pytest
import typer.main

from fp8spec.cli import app
from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, REPO, SPECS, dump_yaml, patched


def _format_commands() -> set[tuple[str, ...]]:
    found = set()

    def walk(command, path):
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, (*path, name))
        elif any(p.name == "format" for p in command.params):
            found.add(path)

    walk(typer.main.get_command(app), ())
    return found


SPEC_COMMANDS = {
    ("validate",): lambda spec: ["validate", spec],
    ("plan",): lambda spec: ["plan", spec],
    ("explain",): lambda spec: ["explain", spec],
    ("diff",): lambda spec: ["diff", spec, spec],
}
OTHER_FAILURES = {
    ("rules",): [["rules", "NOPE999"], ["rules", "--nope"]],
    ("backends", "list"): [["backends", "list", "--nope"]],
    ("backends", "check"): [
        ["backends", "check", "zzz"],
        ["backends", "check", "vllm==0.0.1"],
        ["backends", "check", "--snapshots", "/nonexistent/snapshots"],
        ["backends", "check", "--nope"],
    ],
}




def _report_failures(tmp_path) -> dict[str, tuple[list[str], int]]:
    """name -> (argv, exit code) for the runs `fp8spec report` cannot read, and one it reads but finds no step in."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not a log of any run\n", encoding="utf-8")
    (tmp_path / "broken.tgz").write_text("not an archive\n", encoding="utf-8")
    (tmp_path / "broken.zip").write_text("not an archive\n", encoding="utf-8")
    return {
        "missing path": (["report", str(tmp_path / "missing")], 2),
        "empty folder": (["report", str(tmp_path / "empty")], 2),
        "broken tar archive": (["report", str(tmp_path / "broken.tgz")], 2),
        "broken zip archive": (["report", str(tmp_path / "broken.zip")], 2),
        "missing bundle": (["report", str(tmp_path / "notes.txt"), "--bundle", str(tmp_path / "missing")], 2),
        "baseline without spec": (["report", str(tmp_path / "notes.txt"), "--baseline", str(tmp_path)], 2),
        "unknown option": (["report", str(tmp_path / "notes.txt"), "--nope"], 2),
        # read, but no line of a run in it: the report itself, with its no-step verdict, not an error document
        "non-log file": (["report", str(tmp_path / "notes.txt")], 0),
    }


REPORT_FAILURES = ("missing path", "empty folder", "broken tar archive", "broken zip archive", "missing bundle",
                   "baseline without spec", "unknown option", "non-log file")


def test_every_command_with_format_is_covered():
    from fp8spec.cli import JSON_COMMANDS

    commands = _format_commands()
    assert commands == set(SPEC_COMMANDS) | set(OTHER_FAILURES) | {("report",)}
    assert {path[-1] for path in commands} == JSON_COMMANDS  # what the entry point looks for in argv


def _spec_failures(tmp_path) -> dict[str, tuple[str, int]]:
    """name -> (spec path, exit code) for every kind of spec that cannot be planned or compiled."""
    def spec(name: str, data: dict) -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(dump_yaml(data), encoding="utf-8")
        return str(path)

    bad_config = tmp_path / "config.json"
    bad_config.write_text('{"model_type": "nosucharch"}')
    syntax = tmp_path / "syntax.yaml"
    syntax.write_text("version: 1\nrollout: [\n")
    return {
        "missing file": (str(tmp_path / "missing.yaml"), 2),
        "YAML syntax": (str(syntax), 2),
        "a folder": (str(tmp_path), 2),
        "schema error": (spec("schema", patched(BASE_SPEC, {"rollout": {"tp": "1"}})), 1),
        "unknown model": (spec("unknown", patched(BASE_SPEC, {"model": {"name": "nope/nope"}})), 1),
        "unusable config.json": (
            spec("ref001", patched(BASE_SPEC, {"model": {"name": "x/y", "config_path": str(bad_config)}})), 1),
        "rule error": (spec("rule", patched(BASE_SPEC, {"rollout": {"tp": 3}})), 1),
    }


def _one_document(proc) -> dict:
    text = proc.stdout
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(text.lstrip())
    assert text.lstrip()[end:].strip() == "", f"more than one document on stdout:\n{text}"
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("command", sorted(SPEC_COMMANDS), ids=" ".join)
@pytest.mark.parametrize("failure", ["missing file", "YAML syntax", "a folder", "schema error", "unknown model",
                                     "unusable config.json", "rule error"])
def test_spec_failures_print_one_json_document(tmp_path, command, failure):
    path, code = _spec_failures(tmp_path)[failure]
    for flag in (["-f", "json"], ["--format=json"]):
        proc = run_cli_here(*SPEC_COMMANDS[command](path), *flag)
        assert proc.returncode == code, proc.stdout + proc.stderr
        data = _one_document(proc)
        assert "error" in data or any(d["severity"] == "error" for f in data["files"] for d in f["diagnostics"])


@pytest.mark.parametrize("command", sorted(SPEC_COMMANDS), ids=" ".join)
@pytest.mark.parametrize("usage", [["--backend", "bogus"], ["--nope"], ["--format", "json", "--format", "xml"]],
                         ids=["unknown backend", "unknown option", "bad format"])
def test_usage_errors_print_one_json_document(command, usage):
    proc = run_cli_here(*SPEC_COMMANDS[command](str(SPECS / "qwen3-8b.yaml")), "-f", "json", *usage)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error" in _one_document(proc)


@pytest.mark.parametrize("argv", [a for failures in OTHER_FAILURES.values() for a in failures], ids=" ".join)
def test_other_commands_print_one_json_document_on_failure(argv):
    proc = run_cli_here(*argv, "-f", "json") if "-f" not in argv else run_cli_here(*argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error" in _one_document(proc)


@pytest.mark.parametrize("failure", REPORT_FAILURES)
def test_report_prints_one_json_document_on_each_input_it_cannot_use(tmp_path, failure):
    argv, code = _report_failures(tmp_path)[failure]
    for flag in (["-f", "json"], ["--format=json"]):
        proc = run_cli_here(*argv, *flag)
        assert proc.returncode == code, proc.stdout + proc.stderr
        data = _one_document(proc)
        if code:
            assert data["error"]["kind"] == "usage" and data["error"]["message"], data
        else:
            assert "error" not in data and data["steps"] == [] and data["verdicts"], data


# plan.svg: written with or without matplotlib, so the FIFO is met on every install (plan.png needs the plot extra)
@pytest.mark.parametrize("what", ["a file", "a folder with a FIFO plan.svg"])
def test_plan_json_with_pictures_that_cannot_be_written_is_one_document(tmp_path, what):
    import os

    out = tmp_path / "out"
    if what == "a file":
        out.write_text("x")
    else:
        out.mkdir()
        os.mkfifo(out / "plan.svg")
    proc = run_cli_here("plan", str(SPECS / "qwen3-8b.yaml"), "-f", "json", "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    data = _one_document(proc)
    assert data["error"]["kind"] == "usage" and str(out) in data["error"]["message"]
    assert "verdict" in json.dumps(data)  # the plan itself is there


def test_plan_json_success_is_the_plan_alone(tmp_path):
    proc = run_cli_here("plan", str(SPECS / "qwen3-8b.yaml"), "-f", "json", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "error" not in _one_document(proc)
    assert REPO  # the pictures went to files, not to stdout
    # plan.png only where the plot extra (matplotlib) is installed: the lowest-versions run has none
    drawn = ["plan.png"] if importlib.util.find_spec("matplotlib") else []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [*drawn, "plan.svg"]
