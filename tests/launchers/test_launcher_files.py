"""Which launcher files a bundle gets, and that preflight.json says what the rest of the bundle says."""

from __future__ import annotations

import json
import os
import re

import pytest
from ruamel.yaml import YAML

from tests.compiler.golden import cases, compile_files
from tests.conftest import BASE_SPEC, REPO, patched
from tests.launchers.conftest import compile_bundle

LAUNCHERS = {"preflight.py", "preflight_cpus.py", "preflight_checks.py", "preflight.json", "submit.sh", "slurm.sbatch",
             "rayjob.yaml"}


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_every_trainer_bundle_gets_all_launchers(spec_path, backend):
    from fp8spec.specfile.loader import load_spec

    files = compile_files(spec_path, backend)
    spec = load_spec(spec_path).spec
    # nothing is pip-installed on the nodes: no bundle file asks for it (the shipped lib/ is code, not a step)
    assert not [name for name, text in files.items() if not name.startswith("lib/") and "pip install" in text]
    if "+" not in backend:  # a standalone serve bundle starts no Ray job
        assert not LAUNCHERS & set(files)
        return
    assert LAUNCHERS <= set(files)
    manifest = json.loads(files["manifest.json"])
    assert LAUNCHERS <= set(manifest["files"])
    readme = files["README.md"]
    assert f"it names `{spec.cluster.launcher}`" in readme
    for name in ("submit.sh", "slurm.sbatch", "rayjob.yaml", "preflight.py"):
        assert f"`{name}`" in readme

    expected = json.loads(files["preflight.json"])
    runtime_env = YAML(typ="safe").load(files["runtime_env.yaml"])
    assert expected["env"] == runtime_env["env_vars"]
    pins = {p["name"]: p["version"] for p in expected["packages"]}
    stack = {"verl": spec.stack.verl, spec.rollout.engine: getattr(spec.stack, spec.rollout.engine)}
    if spec.training.backend == "megatron":
        stack |= {"megatron-core": spec.stack.megatron_core, "transformer-engine": spec.stack.transformer_engine}
    if spec.training.backend == "fsdp" and spec.training.attention == "flash_attention_2":
        stack |= {"flash-attn": ">=2.3.3"}  # verl's default attention for the FSDP model needs it on the node
    elif spec.training.backend == "fsdp":  # sdpa / eager with padding removal: transformers' packed-sequence masks
        stack |= {"transformers": ">=4.54.0"}
    if spec.training.backend == "megatron":
        if spec.training.attention == "flash_attention_2":
            stack |= {"flash-attn": ">=2.1.1"}  # verl's default Megatron attention (flash): TE uses flash-attn
        stack |= {"mbridge": ">=0.15.1"} if spec.training.bridge == "mbridge" else {"megatron-bridge": ">=0.5.1"}
    assert pins == stack  # no fp8spec pin: the patch set ships in the bundle, nothing is pip-installed
    patches = manifest["runtime_patches"]
    shipped = {name: text for name, text in files.items() if name.startswith("lib/")}
    if patches["patches"]:
        # the shipped files are the package's own, recorded with their sha256 in manifest and preflight.json
        runtime = expected["runtime"]
        assert runtime["py_module"] == patches["py_module"] == "lib/fp8spec" == runtime_env["py_modules"][0]
        assert {f"lib/{p}" for p in runtime["files"]} == set(shipped)
        for path, text in shipped.items():
            assert text == (REPO / path[len("lib/"):]).read_text(encoding="utf-8"), path
            assert manifest["files"][path] == runtime["files"][path[len("lib/"):]]
        assert runtime["sha256"] == patches["fileset_sha256"]
        assert "lib/fp8spec/runtime/__init__.py" in shipped and "lib/fp8spec/__init__.py" in shipped
    else:
        assert expected["runtime"] is None and not shipped and "py_modules" not in runtime_env
    assert "pip install" not in readme
    assert expected["data"]["files"] == [f for f in (spec.data.train_files, spec.data.val_files) if f]
    assert expected["hardware"]["nodes"] == spec.hardware.nodes
    assert expected["hardware"]["gpus_per_node"] == spec.hardware.gpus_per_node
    assert expected["hardware"]["cuda"] == spec.hardware.cuda
    assert expected["spec"]["sha256"] == manifest["spec"]["sha256"]
    assert expected["submission_id"] == (f"fp8spec-{spec.name}-{backend.replace('+', '-')}-"
                                         f"{manifest['spec']['sha256'][:12]}")
    assert expected["submission_id"] in files["submit.sh"] and expected["submission_id"] in files["rayjob.yaml"]


def test_preflight_program_is_shipped_verbatim(bundle_8b):
    from fp8spec.preflight import CHECKS, CPU_CHECK, PROGRAM

    for program in (PROGRAM, CPU_CHECK, CHECKS):
        assert (bundle_8b / program.name).read_bytes() == program.read_bytes(), program.name


def test_scripts_are_executable(bundle_8b):
    for name in ("submit.sh", "slurm.sbatch", "launch.sh"):
        assert os.access(bundle_8b / name, os.X_OK), name
    assert not os.access(bundle_8b / "rayjob.yaml", os.X_OK)


def test_submission_id_follows_the_spec_content(write_spec, tmp_path):
    a = compile_bundle(write_spec(patched(BASE_SPEC, {"name": "ids"}), "a.yaml"), tmp_path / "a")
    again = compile_bundle(write_spec(patched(BASE_SPEC, {"name": "ids"}), "a2.yaml"), tmp_path / "a2")
    changed = compile_bundle(write_spec(patched(BASE_SPEC, {"name": "ids", "rollout": {"n": 8}}), "b.yaml"),
                             tmp_path / "b")
    ids = [json.loads((b / "preflight.json").read_text())["submission_id"] for b in (a, again, changed)]
    assert ids[0] == ids[1] and ids[0] != ids[2]
    assert all(i.startswith("fp8spec-ids-fsdp-vllm-") for i in ids)


def test_model_facts_reach_preflight_json(bundle_30b):
    expected = json.loads((bundle_30b / "preflight.json").read_text())
    assert expected["model"]["config"] == {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                                           "num_key_value_heads": 4, "num_experts": 128, "vocab_size": 151936}
    assert expected["hardware"]["device_name"] == "H100" and expected["hardware"]["compute_capability"] == "9.0"


@pytest.mark.parametrize("spec_path,backend", [c for c in cases() if "+" in c[1]], ids=lambda v: getattr(v, "stem", v))
def test_scripts_are_valid_bash(spec_path, backend, tmp_path):
    """Every generated script of every example trainer bundle parses (bash -n), whatever the spec leaves empty."""
    import subprocess

    files = compile_files(spec_path, backend)
    for name in ("launch.sh", "submit.sh", "slurm.sbatch"):
        (tmp_path / name).write_text(files[name])
        proc = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"


MESSAGE = re.compile(r"\b(?:die|echo)\s+\"")


def _double_quoted_end(line: str, start: int) -> int:
    """Index just past the closing quote of the bash double-quoted string opened at ``start`` (its quote);
    $(...) and ${...} inside are skipped whole (quotes in them open a new context, which is fine)."""
    i = start + 1
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if line.startswith("$(", i) or line.startswith("${", i):
            close, depth, i = ")" if line[i + 1] == "(" else "}", 1, i + 2
            opener = line[i - 1]
            while i < len(line) and depth:
                depth += (line[i] == opener) - (line[i] == close)
                i += 1
            continue
        if c == '"':
            return i + 1
        i += 1
    raise AssertionError(f"unterminated message: {line}")


def nested_quote_messages(script: str) -> list[str]:
    """Message lines (die/echo "...") whose string is glued to more text: a double quote meant as a literal
    inside the message that ended it early instead (bash still parses it, the quoting is silently wrong)."""
    bad = []
    for line in script.splitlines():
        for m in MESSAGE.finditer(line):
            end = _double_quoted_end(line, m.end() - 1)
            if end < len(line) and not (line[end].isspace() or line[end] in ";|&)>"):
                bad.append(line.strip())
    return bad


def test_the_quote_check_fires_on_a_nested_quote():
    assert nested_quote_messages('  || die "the job needs "abc": submit it"') != []
    assert nested_quote_messages("  || die \"dir '$wd' is not \\\"here\\\" $(cd \"$x\" && pwd)\" >&2") == []


@pytest.mark.parametrize("spec_path,backend", [c for c in cases() if "+" in c[1]], ids=lambda v: getattr(v, "stem", v))
def test_script_messages_nest_no_double_quotes(spec_path, backend):
    files = compile_files(spec_path, backend)
    for name in ("launch.sh", "submit.sh", "slurm.sbatch"):
        assert nested_quote_messages(files[name]) == [], name


FILE_NAME = re.compile(r"`([A-Za-z0-9_./-]+\.(?:sh|sbatch|yaml|json|py|svg|png|txt))`")


@pytest.mark.parametrize("spec_path,backend", cases(), ids=lambda v: getattr(v, "stem", v))
def test_readme_names_only_files_the_bundle_has(spec_path, backend):
    """Every bundle file the README names in backticks is in the bundle (a standalone serve bundle has no
    launch.sh, overrides.yaml or runtime_env.yaml). Not bundle files: the spec it came from, the reward file's
    source path as the spec names it, the model folder's config.json the preflight reads."""
    from fp8spec.specfile.loader import load_spec

    files = compile_files(spec_path, backend)
    spec = load_spec(spec_path).spec
    readme = files["README.md"]
    sources = {spec_path.name, spec_path.relative_to(REPO).as_posix(), "config.json"}
    if spec.reward.custom_function is not None:
        sources.add(spec.reward.custom_function.path)
    named = set(FILE_NAME.findall(readme)) - sources
    assert named, readme  # the pattern finds the names (manifest.json at least)
    missing = sorted(n for n in named if n not in files and not any(f.startswith(n.rstrip("/") + "/") for f in files))
    assert missing == [], missing
