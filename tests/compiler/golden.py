"""Golden bundles: every example spec compiled for every backend it is valid for, pinned by what they mean.

Each golden folder holds the bundle's own files byte for byte, except what the package copies into every trainer
bundle (the runtime patch set under lib/ and preflight.py): those are pinned once, in ``tests/golden/shipped.json``
(the sha256 of the runtime's file set and of preflight.py), and the bundle files that embed them (manifest.json,
preflight.json, rayjob.yaml's ConfigMap) hold a placeholder instead, after the test has checked the embedded
copy against the shipped files. A change to a runtime kernel then rewrites one line, not every trainer golden.
Trainer bundles also pin ``composed.yaml``: the leaves of verl's composed Hydra config that the bundle's
overrides change, each with verl's default, so a golden diff reads as a change of meaning.

Regenerate after an intended change:  FP8SPEC_REGEN_GOLDEN=1 pytest tests/compiler/test_golden.py
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path

from tests.conftest import EXAMPLE_SPECS, REPO

GOLDEN = REPO / "tests" / "golden"
SHIPPED = GOLDEN / "shipped.json"
REGEN = os.environ.get("FP8SPEC_REGEN_GOLDEN") == "1"
# CI compares with what is committed; it never rewrites the goldens (a regenerating run cannot fail).
if REGEN and os.environ.get("CI"):
    raise RuntimeError("FP8SPEC_REGEN_GOLDEN=1 is refused when CI is set: regenerate locally and commit the diff")

PREFLIGHT = "preflight.py"
PREFLIGHT_PROGRAMS = (PREFLIGHT, "preflight_cpus.py", "preflight_checks.py")  # copied from fp8spec/preflight/ unchanged
SHA_PLACEHOLDER = "<sha256, checked against the file>"
RUNTIME_PLACEHOLDER = "<the shipped runtime's file-set sha256: tests/golden/shipped.json>"
COPY_PLACEHOLDER = "<the shipped file, checked against the package's copy>"


def cases() -> list[tuple[Path, str]]:
    from fp8spec.specfile.loader import load_spec

    out = []
    for path in EXAMPLE_SPECS:
        spec = load_spec(path).spec
        out.append((path, f"{spec.training.backend}+{spec.rollout.engine}"))
        out.append((path, spec.rollout.engine))
    return out


def compile_files(spec_path: Path, backend: str) -> dict[str, str]:
    """Compile in memory exactly as `fp8spec compile` does (spec named relative to the repo). Compiled once
    per process and case; each caller gets its own dict."""
    return dict(_compiled(spec_path, backend))


@lru_cache(maxsize=None)
def _compiled(spec_path: Path, backend: str) -> dict[str, str]:
    from fp8spec.compiler.build import build_settings_plan, validate_for
    from fp8spec.compiler.bundle import bundle_files

    rel = str(spec_path.relative_to(REPO))
    validation, choice = validate_for(spec_path, rel, backend)  # retargeted when backend is not the spec's
    assert not validation.errors, [d.render() for d in validation.errors]
    valid = validation.valid()
    return bundle_files(valid, choice, build_settings_plan(valid, choice), rel)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_shipped(name: str) -> bool:
    """A file the package copies into the bundle unchanged: the runtime patch set and the preflight program."""
    return name in PREFLIGHT_PROGRAMS or name.startswith("lib/")


def shipped_pins(shipped: dict[str, str]) -> dict[str, str]:
    """What shipped.json pins of ``shipped``: the runtime file set's digest (as manifest and preflight compute
    it) and the preflight programs' sha256."""
    from fp8spec.patchset import fileset_digest

    runtime = {name.split("/", 1)[1]: sha256(text) for name, text in shipped.items() if name.startswith("lib/")}
    pins = {"runtime_fileset_sha256": fileset_digest(runtime)} if runtime else {}
    for name in PREFLIGHT_PROGRAMS:
        if name in shipped:
            pins[name] = sha256(shipped[name])
    return pins


def normalized(files: dict[str, str], shipped: dict[str, str]) -> dict[str, str]:
    """The bundle files as the golden folder holds them: every embedded copy (or hash) of a shipped file checked
    against that file, then replaced by a placeholder."""
    out = dict(files)
    if "manifest.json" in out:
        out["manifest.json"] = _manifest(out["manifest.json"], {**files, **shipped})
    if "preflight.json" in out:
        out["preflight.json"] = _preflight(out["preflight.json"], shipped)
    if "rayjob.yaml" in out:
        out["rayjob.yaml"] = _rayjob(out["rayjob.yaml"], files, shipped)
    return out


def _manifest(text: str, every_file: dict[str, str]) -> str:
    data = json.loads(text)
    for name, sha in data["files"].items():
        assert sha == sha256(every_file[name]), f"manifest.json: the sha256 of {name} is not the file's"
        data["files"][name] = SHA_PLACEHOLDER
    patches = data["runtime_patches"]
    if "fileset_sha256" in patches:
        assert patches["fileset_sha256"] == shipped_pins(_lib(every_file))["runtime_fileset_sha256"]
        patches["fileset_sha256"] = RUNTIME_PLACEHOLDER
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _lib(files: dict[str, str]) -> dict[str, str]:
    return {name: text for name, text in files.items() if is_shipped(name)}


def _preflight(text: str, shipped: dict[str, str]) -> str:
    data = json.loads(text)
    runtime = data.get("runtime")
    if runtime:
        for path, sha in runtime["files"].items():
            assert sha == sha256(shipped[f"lib/{path}"]), f"preflight.json: the sha256 of {path} is not the file's"
            runtime["files"][path] = SHA_PLACEHOLDER
        assert runtime["sha256"] == shipped_pins(shipped)["runtime_fileset_sha256"]
        runtime["sha256"] = RUNTIME_PLACEHOLDER
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


_CONFIGMAP_ENTRY = re.compile(r'^(  )("[^"]+"): (".*")$', re.MULTILINE)


def _rayjob(text: str, files: dict[str, str], shipped: dict[str, str]) -> str:
    """The ConfigMap's copies of bundle files (one JSON-quoted line each, templates/rayjob.yaml.j2): each checked
    against the file, then a placeholder (the files are pinned on their own, the shipped ones in shipped.json)."""
    every_file = {**files, **shipped}
    copies = 0

    def replace(match: re.Match) -> str:
        nonlocal copies
        path = json.loads(match.group(2)).replace("--", "/")
        if path not in every_file:
            return match.group(0)
        assert json.loads(match.group(3)) == every_file[path], f"rayjob.yaml: the ConfigMap's {path} is not the file"
        copies += 1
        placeholder = COPY_PLACEHOLDER if path in shipped else f"<the bundle's {path}, checked against it>"
        return f"{match.group(1)}{match.group(2)}: {json.dumps(placeholder)}"

    out = _CONFIGMAP_ENTRY.sub(replace, text)
    assert copies >= len(shipped), f"rayjob.yaml carries {copies} bundle files, fewer than the {len(shipped)} shipped"
    return out


def composed_changes(files: dict[str, str]) -> str:
    """The leaves of verl's composed config that the bundle's overrides change, with verl's default: what the
    bundle means to verl (overrides.yaml is how it says it)."""
    from ruamel.yaml import YAML

    from tests.compiler.verl_config import compose, leaves

    overrides = list(YAML(typ="safe").load(files["overrides.yaml"]))
    groups = [o for o in overrides if "." not in o.split("=", 1)[0]]  # config-group choices (model_engine=...)
    default, ours = leaves(compose(groups)), leaves(compose(overrides))
    lines = [
        "# verl's composed config: every leaf the bundle's overrides change, verl's default after '#'",
        f"# (defaults composed with the bundle's config-group choices: {', '.join(groups) or 'none'})",
    ]
    for key in sorted(set(default) | set(ours)):
        if default.get(key, "<absent>") != ours.get(key, "<absent>"):
            lines.append(f"{key}: {ours.get(key, '<absent>')}  # {default.get(key, '<absent>')}")
    return "\n".join(lines) + "\n"
