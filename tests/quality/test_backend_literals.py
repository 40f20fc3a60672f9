"""Backend facts live in backends/, not in Python: the compiler and the runtime name no backend key, flag,
environment variable or version as a literal.

Every string constant in ``fp8spec/compiler``, ``fp8spec/engines`` and ``fp8spec/runtime`` (docstrings and comments are prose and
are not read) is checked against:

- the shapes of backend facts: a release version (``0.24.0``), a CLI flag (``--kv-cache-dtype``), a Hydra key
  under one of verl's config groups (``actor_rollout_ref.rollout.name``), a key suffix (``.hf_overrides``), an
  environment variable of a backend (``VLLM_USE_DEEP_GEMM_E8M0``; fp8spec's own ``FP8SPEC_*`` are not backend
  facts);
- the values themselves: any compound name (with ``_``, ``-`` or ``.``) a profile records as a key, flag,
  environment variable, engine argument or config field (``kv_cache_dtype``, ``moe_router_dtype``) found verbatim.

Spec field paths (``trainer.save_freq``, the source of a setting) are fp8spec's own vocabulary and are not
backend facts, even where verl happens to use the same name; file name extensions are not key suffixes.

``ALLOWED`` lists the exceptions, each with the reason it cannot come from backends/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fp8spec.profiles import KINDS, available_versions, load_profile
from tests.conftest import REPO

SCANNED = ("fp8spec/compiler", "fp8spec/engines", "fp8spec/runtime")
# An engine's folder also holds its rules, whose rationales cite the engine's source (versions, file:line), as
# every rule module does, and its wheel extractor (fp8spec.snapshots' kind), which names what it reads in the wheel.
NOT_SCANNED = ("rules.py", "snapshot.py")

VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?![\w])")
FLAG = re.compile(r"^--[a-z][a-z0-9]*(-[a-z0-9]+)*$")
HYDRA_ROOTS = ("actor_rollout_ref", "algorithm", "trainer", "data", "ray_kwargs", "reward", "critic",
               "reward_model", "custom_reward_function", "model_engine")
HYDRA_KEY = re.compile(r"^\+*(" + "|".join(HYDRA_ROOTS) + r")(\.[a-z_][a-z0-9_]*)+")
SUFFIX = re.compile(r"^\.[a-z_][a-z0-9_]*$")
FILE_EXTENSIONS = {".yaml", ".yml", ".json", ".py", ".sh", ".md", ".svg", ".png", ".lock", ".tmp", ".old", ".pyc"}
BACKEND_ENV = re.compile(r"^(VLLM|SGLANG|VERL|NVTE|RAY|NCCL|TORCH|CUDA|TRITON)_[A-Z0-9_]+$")
# Profile fact categories whose values are names the code would otherwise spell out.
NAME_CATEGORIES = ("key", "flag", "env", "engine_arg", "field", "optimizer", "quantization_config", "hf_config")

# (file, literal) -> why it stays in Python.
ALLOWED = {
    # The runtime runs inside GPU workers from the bundle's lib/ (fp8spec/__init__.py + fp8spec/runtime only) and
    # cannot read backends/; it refuses any other release. test_runtime_known_versions_are_the_profiled_ones keeps
    # this table equal to the profiles.
    ("fp8spec/runtime/manifest.py", "0.9.1"): "KNOWN_VERSIONS (see test_runtime_known_versions...)",
    ("fp8spec/runtime/manifest.py", "0.24.0"): "KNOWN_VERSIONS",
    ("fp8spec/runtime/manifest.py", "0.33.0"): "KNOWN_VERSIONS",
    ("fp8spec/runtime/manifest.py", "0.5.12"): "KNOWN_VERSIONS",
    ("fp8spec/runtime/manifest.py", "0.5.23"): "KNOWN_VERSIONS",
    # The patch reads verl's own FP8QuantizerHelper.quant_config in the trainer process (verl/utils/fp8_utils.py),
    # a dict or an object with this attribute: code that patches verl names what it touches, and the version guard
    # refuses any verl but the one it was written against.
    ("fp8spec/runtime/quantization/verl_quant.py", "weight_block_size"): "verl's quant_config field, read by the patch",
    # The sender's BF16 cast applies to model weights only: Hugging Face checkpoint names end in ".weight"
    # (torch.nn.Module's parameter naming), which the pushed KV scales ("*_scale") do not; a tensor name, not a key.
    ("fp8spec/runtime/weight_sync/sender/fused_send.py", ".weight"): "the checkpoint's weight-name suffix the BF16 cast selects",
    # A citation, not a setting: the SGLang release whose source the pool formula was read from, named in the
    # planner's JSON sources (`fp8spec plan -f json`); nothing is emitted from it.
    ("fp8spec/engines/sglang/memory.py", "0.5.12"): "the memory model's source release (plan JSON sources)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def spec_paths() -> set[str]:
    from fp8spec.specfile.reference import fields

    return {path for path, _, _ in fields()}


def _is_spec_source(text: str, paths: set[str]) -> bool:
    """A setting's source: one spec field path, or several joined with ', '."""
    return all(part.strip() in paths for part in text.split(","))


def _names(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        out = [value["name"]] if isinstance(value.get("name"), str) else []
        return out + ([value["flag"]] if isinstance(value.get("flag"), str) else [])
    return []


def profile_names() -> dict[str, str]:
    """Every name a profile records (key, flag, env var, engine argument, field) -> one fact that records it."""
    out: dict[str, str] = {}
    for kind in KINDS:
        for version in available_versions(kind):
            prof = load_profile(kind, version)
            for fact_id in prof.facts:
                if fact_id.split(".", 1)[0] in NAME_CATEGORIES:
                    for name in _names(prof.value(fact_id)):
                        if re.search(r"[_.-]", name):
                            out.setdefault(name, f"{kind} {version} {fact_id}")
    return out


def findings(paths: list[Path], names: dict[str, str], root: Path = REPO) -> list[str]:
    found = []
    sources = spec_paths()
    for path in paths:
        rel = path.relative_to(root).as_posix()
        for line, text in string_literals(path):
            why = None
            if _is_spec_source(text, sources) or text in FILE_EXTENSIONS or len(text) < 4:
                continue
            if VERSION.search(text):
                why = "a version"
            elif FLAG.match(text):
                why = "a CLI flag"
            elif HYDRA_KEY.match(text):
                why = "a Hydra key"
            elif SUFFIX.match(text):
                why = "a key suffix"
            elif BACKEND_ENV.match(text):
                why = "a backend environment variable"
            elif text in names:
                why = f"recorded by {names[text]}"
            if why is None:
                continue
            literal = VERSION.search(text).group(0) if why == "a version" else text
            if (rel, literal) not in ALLOWED:
                found.append(f"{rel}:{line}: {text!r} is {why}")
    return found


def scanned_files() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (REPO / folder).rglob("*.py")
                  if not (p.parent.parent.name == "engines" and p.name in NOT_SCANNED))


def test_no_backend_literal_in_compiler_or_runtime():
    assert findings(scanned_files(), profile_names()) == []


def test_every_allowance_is_still_needed():
    names = profile_names()
    seen = set()
    for path in scanned_files():
        rel = path.relative_to(REPO).as_posix()
        for _, text in string_literals(path):
            m = VERSION.search(text)
            seen.add((rel, m.group(0) if m else text))
    assert set(ALLOWED) <= seen, sorted(set(ALLOWED) - seen)
    assert names  # the profiles were read


@pytest.mark.parametrize("source, expected", [
    ('x = "0.24.0"', "a version"),
    ('x = f"vllm=={v}" if v else "vllm 0.33.0"', "a version"),
    ('x = "--kv-cache-dtype"', "a CLI flag"),
    ('x = "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype"', "a Hydra key"),
    ('x = base + ".hf_overrides"', "a key suffix"),
    ('x = {"VLLM_USE_DEEP_GEMM_E8M0": "0"}', "a backend environment variable"),
    ('x = tc + "moe_router_dtype"', "recorded by"),
    ('"""A docstring naming --kv-cache-dtype and vllm 0.24.0 is prose."""\nx = "FP8SPEC_QUANT_CHUNK_MB"', None),
    ('add("trainer.save_freq", "kv_cache.dtype, linear.exclude")  # spec field paths: the setting\'s source', None),
    ('x = "trainer.save_freq_typo"', "a Hydra key"),
    ('x = Path(name + ".yaml")', None),
])
def test_the_check_has_teeth(tmp_path, source, expected):
    path = tmp_path / "probe.py"
    path.write_text(source + "\n", encoding="utf-8")
    found = findings([path], profile_names(), root=tmp_path)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found
