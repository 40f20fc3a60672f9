"""Every schema field is described, the field reference (docs/spec.md) is generated from the schema and
current, and every verl key a description names exists in verl's real Hydra tree (the verl snapshot)."""

from __future__ import annotations

import json
import re

from fp8spec.specfile.reference import fields, reference_markdown
from tests.conftest import REPO

DOCS = REPO / "docs" / "spec.md"
REGEN = "regenerate with: fp8spec schema --docs docs/spec.md"


def test_every_field_has_a_description():
    missing = [path for path, info, _ in fields() if not (info.description and len(info.description) > 15)]
    assert not missing, f"fields without a description: {missing}"


def test_reference_is_current():
    assert DOCS.read_text(encoding="utf-8") == reference_markdown(), REGEN


def test_reference_lists_every_field():
    text = DOCS.read_text(encoding="utf-8")
    for path, _, section in fields():
        if section is None:
            assert f"| `{path}` |" in text, path


def test_cli_writes_the_reference(tmp_path):
    from tests.cli.inprocess import run_cli_here

    out = tmp_path / "spec.md"
    proc = run_cli_here("schema", "--docs", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == DOCS.read_text(encoding="utf-8")


_DOTTED = re.compile(r"(?<![\w./<>-])([a-z_]+(?:\.(?:[a-z0-9_]+|<engine>))+)")
_NOT_KEYS = (".json", ".py", ".yaml", ".parquet", ".sbatch", ".sh", "torch.version.cuda")


def _verl_tree() -> tuple[set[str], set[str]]:
    """The keys of verl 0.9.1's composed Hydra trees, and the mappings that take '+' children (open ones, and
    those the verl profile says accept undeclared keys)."""
    from fp8spec.profiles import load_profile

    data = json.loads((REPO / "backends" / "snapshots" / "verl-0.9.1.json").read_text())["data"]["configs"]
    keys, mappings = set(), set(load_profile("verl", "0.9.1").value("hydra.plus_required_under"))
    for tree in data.values():
        keys.update(tree["keys"])
        mappings.update(tree["open_mappings"])
    return keys, mappings


def _known(token: str, keys: set[str], mappings: set[str]) -> bool:
    """Whether ``token`` ends a verl key, starts one (a section), or sits under a mapping taking '+' keys."""
    concrete = token.replace("<engine>", "vllm")
    for key in keys | mappings:
        full = "." + key + "."
        if ("." + concrete + ".") in full or full.endswith("." + concrete + "."):
            return True
    parts = concrete.split(".")
    ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
    return any(("." + m).endswith("." + a) for m in mappings for a in ancestors)


def test_verl_keys_named_in_descriptions_exist():
    keys, mappings = _verl_tree()
    # names that can start a verl key (actor., rollout.: keys under actor_rollout_ref.); other dotted names in
    # descriptions (Kubernetes or Slurm fields, file names) are not verl's
    components = {part for key in keys | mappings for part in key.split(".")}
    spec_paths = {path for path, _, _ in fields()}
    unknown = []
    checked = 0
    for path, info, _ in fields():
        # a measured figure's id ("measured:" and a dotted id) names fp8spec/data/measured.yaml, not a verl key
        for token in _DOTTED.findall(re.sub(r"measured:\S+", "", info.description or "")):
            token = token.rstrip(".")
            if token in spec_paths or token.endswith(_NOT_KEYS) or token.split(".")[0] not in components:
                continue
            checked += 1
            if not _known(token, keys, mappings):
                unknown.append((path, token))
    assert checked > 40  # the scan finds the keys
    assert not unknown, unknown
