"""backends/ is the one source of backend facts: the copies that must live elsewhere are kept equal to it.

- The runtime patch set runs inside GPU workers from the bundle's lib/ and cannot read backends/, so it keeps its
  own table of the releases it patches (``fp8spec.runtime.manifest.KNOWN_VERSIONS``): exactly the profiled ones.
- ``backends/snapshots`` holds a snapshot of every profiled release (the drift report checks profiles against
  them), and only of profiled kinds.
- The default stack (``backends/stack.yaml``) names a profiled release for every stack field, and its versions
  are the ones the verl profile records verl pinning (``supports.*``) or pairing (``stack.*``).
- The kinds are listed once (``fp8spec.targets.KINDS``): profiles folders, snapshot extractors and the spec's
  ``stack`` section all follow it.
"""

from __future__ import annotations

from fp8spec.profiles import available_kinds, available_versions, backends_root, load_profile
from fp8spec.runtime import manifest
from fp8spec.snapshots import PACKAGES, committed_specs, list_snapshots, parse_spec
from fp8spec.specfile.model import StackSection
from fp8spec.stack import default_stack
from fp8spec.targets import ENGINES, KINDS, STACK_KINDS


def test_runtime_known_versions_are_the_profiled_ones():
    assert set(manifest.KNOWN_VERSIONS) == {"verl", *ENGINES}  # what the runtime patches
    for kind, versions in manifest.KNOWN_VERSIONS.items():
        assert list(versions) == available_versions(kind), kind
    for name, patch in manifest.PATCHES.items():
        assert patch["verl"] == manifest.KNOWN_VERSIONS["verl"], name
        assert {e: tuple(v) for e, v in patch["engines"].items()} == {e: manifest.KNOWN_VERSIONS[e] for e in ENGINES}


def test_every_profiled_release_has_a_snapshot_and_every_snapshot_a_kind():
    pinned = {parse_spec(s) for s in committed_specs()}
    profiled = {(kind, version) for kind in KINDS for version in available_versions(kind)}
    assert profiled <= pinned, sorted(profiled - pinned)
    assert {name for name, _ in pinned} <= set(KINDS)
    assert len(pinned) == len(list_snapshots())


def test_kinds_are_listed_once():
    folders = {p.name for p in backends_root().iterdir() if any(p.glob("[0-9]*.yaml"))}  # not slurm/, snapshots/
    assert folders == set(KINDS) == set(available_kinds())  # the profile folders
    assert set(PACKAGES) == set(KINDS)  # one snapshot extractor per kind
    assert set(StackSection.model_fields) == set(STACK_KINDS)  # one stack field per kind
    assert set(STACK_KINDS.values()) == set(KINDS)


def test_default_stack_is_profiled_and_follows_verls_pins():
    stack = default_stack()
    assert set(stack) == set(STACK_KINDS)
    for field, version in stack.items():
        assert version in available_versions(STACK_KINDS[field]), (field, version)
    verl = load_profile("verl", stack["verl"])
    assert verl.value("supports.vllm") == stack["vllm"]
    assert verl.value("supports.sglang") == stack["sglang"]
    assert verl.value("stack.megatron_core") == stack["megatron_core"]
    assert verl.value("stack.transformer_engine") == stack["transformer_engine"]
    assert stack["verl"] == available_versions("verl")[-1]  # the newest profiled verl


def test_package_distributions_start_with_the_profiled_package():
    for kind in KINDS:
        for version in available_versions(kind):
            prof = load_profile(kind, version)
            names = prof.value("package.distributions")
            assert names[0] == prof.source.package.split("==")[0] == kind, (kind, version, names)
