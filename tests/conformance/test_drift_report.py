"""The drift report (``fp8spec backends check``): every profiled version's snapshot still confirms every fact
its profile marks as snapshot-confirmable, and the profile cites the wheel the snapshot was read from. A
tampered snapshot or a malformed confirm clause is reported."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from fp8spec.profiles import KINDS, ProfileError, available_versions, load_profile, parse_profile_text
from fp8spec.snapshots import snapshot_dir
from fp8spec.snapshots.drift import drift_report, render_text

ALL = [(k, v) for k in KINDS for v in available_versions(k)]

# Fact categories a snapshot can always check (flags, fields, env vars, verl keys, recipe classes): a fact in
# one of them without confirm clauses is a forgotten clause, unless listed here with the reason.
CONFIRMABLE = ("flag.", "field.", "env.", "key.", "declared.", "optimizer.", "recipe.",
               "hydra.plus_required_under", "removed_keys", "values.kv_cache_dtype", "values.quantization")
NOT_IN_ANY_SNAPSHOT = {
    # verl's snapshot is its composed Hydra tree (no environment table); the conformance suite checks this
    # variable in the installed verl 0.9.1 source instead (tests/conformance/checks.py verl_env).
    ("verl", "env.external_modules"),
    # Ray's job marker, read by verl/trainer/constants_ppo.py; no snapshot has an environment table for it:
    # the real launch tests (tests/launchers/test_real_launch.py) run launch.sh inside and outside a Ray job.
    ("verl", "env.ray_job_config"),
    # read in TransformerEngine's C++ core (libtransformer_engine.so of transformer_engine_cu13); the snapshot is of
    # the Python wheel. Its evidence is the source and the 2.20.2 library's fallback warning on an H200.
    ("transformer-engine", "env.cutlass_grouped_gemm"),
}


def test_every_profile_is_confirmed_by_its_snapshot():
    reports = drift_report()
    assert [(r.kind, r.version) for r in reports] == ALL
    bad = [r for r in reports if not r.ok]
    assert not bad, "profile facts no longer confirmed:\n" + render_text(bad, failures_only=True)


@pytest.mark.parametrize("kind,version", ALL)
def test_snapshot_checkable_facts_carry_confirm_clauses(kind, version):
    p = load_profile(kind, version)
    assert p.confirmable(), f"{kind} {version}: no fact is checked against its snapshot"
    forgotten = [fid for fid in p.evidence_only()
                 if fid.startswith(CONFIRMABLE) and (kind, fid) not in NOT_IN_ANY_SNAPSHOT]
    assert not forgotten, f"{kind} {version}: add confirm clauses to {forgotten}"


def test_report_counts_and_lists_evidence_only_facts():
    [r] = drift_report(["vllm==0.33.0"])
    assert "capability.pads_block_shards" in r.evidence_only
    ids = [f.fact_id for f in r.facts]
    assert "flag.calculate_kv_scales" in ids and "values.kv_cache_dtype" in ids
    text = render_text([r])
    assert "ok    flag.calculate_kv_scales: no flag --calculate-kv-scales" in text
    assert "evidence only: " in text and "ok    source:" in text
    data = r.to_dict()
    assert data["ok"] and json.dumps(data)


@pytest.fixture
def tampered(tmp_path):
    """A copy of backends/snapshots with drift: vLLM 0.33.0 'regained' --calculate-kv-scales and lost
    --kv-cache-dtype, SGLang 0.5.12 gained plain 'fp8' as a KV dtype, TE's snapshot names another wheel,
    and verl's tree declares the Megatron FP8 key (so '+' would now be wrong)."""
    root = tmp_path / "snapshots"
    shutil.copytree(snapshot_dir(), root)

    def edit(name, fn):
        path = root / name
        raw = json.loads(path.read_text())
        fn(raw)
        path.write_text(json.dumps(raw))

    def vllm(raw):
        flags = raw["data"]["flags"]
        flags["--calculate-kv-scales"] = {"dest": "calculate_kv_scales", "kind": "boolean_optional"}
        del flags["--kv-cache-dtype"]

    def sglang(raw):
        raw["data"]["choices"]["kv_cache_dtype"].append("fp8")

    def te(raw):
        raw["artifact"]["sha256"] = "0" * 64

    def verl(raw):
        cfg = raw["data"]["configs"]["ppo_trainer+model_engine=megatron"]
        cfg["keys"]["actor_rollout_ref.actor.megatron.override_transformer_config.fp8"] = None

    edit("vllm-0.33.0.json", vllm)
    edit("sglang-0.5.12.json", sglang)
    edit("transformer-engine-2.20.2.json", te)
    edit("verl-0.9.1.json", verl)
    (root / "megatron-core-0.19.2.json").unlink()
    return root


def test_drift_is_reported(tampered):
    reports = {r.spec: r for r in drift_report(directory=tampered)}
    failed = {spec: [f.fact_id for f in r.mismatches] for spec, r in reports.items() if not r.ok}
    assert set(failed) == {"vllm==0.33.0", "sglang==0.5.12", "transformer-engine==2.20.2", "verl==0.9.1",
                           "megatron-core==0.19.2"}
    assert set(failed["vllm==0.33.0"]) == {"flag.calculate_kv_scales", "flag.kv_cache_dtype"}
    assert failed["sglang==0.5.12"] == ["values.kv_cache_dtype"]
    assert failed["transformer-engine==2.20.2"] == []  # facts fine, but the source no longer matches
    assert "sha256" in reports["transformer-engine==2.20.2"].source_problems[0]
    assert set(failed["verl==0.9.1"]) == {"key.megatron_transformer_override", "hydra.plus_required_under",
                                          "declared.megatron_transformer_override_keys"}
    assert "no snapshot" in reports["megatron-core==0.19.2"].source_problems[0]
    text = render_text(list(reports.values()), failures_only=True)
    assert "FAIL  flag.calculate_kv_scales" in text
    assert "no flag --calculate-kv-scales: dest calculate_kv_scales" in text
    assert "choice kv_cache_dtype = 'fp8'" in text


def test_selection_and_unknown_versions():
    from fp8spec.profiles import ProfileNotFound

    assert [r.spec for r in drift_report(["sglang"])] == ["sglang==0.5.12", "sglang==0.5.23"]
    assert [r.spec for r in drift_report(["megatron_core==0.19.2"])] == ["megatron-core==0.19.2"]
    with pytest.raises(ProfileNotFound):
        drift_report(["vllm==0.1.0"])
    with pytest.raises(ProfileNotFound):
        drift_report(["torch"])


# ----------------------------------------------------------------------------- confirm clause schema
PROFILE = textwrap.dedent(
    """\
    kind: vllm
    version: "9.9.9"
    source:
      package: "vllm==9.9.9"
      artifact: "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
      sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    facts:
      values.kv_cache_dtype:
        value: [auto, fp8]
        evidence: "vllm/config/cache.py:1"
        confirm:
    """
)


def _profile(*clauses: str):
    return parse_profile_text(PROFILE + "".join(f"      - {c}\n" for c in clauses))


def test_confirm_clauses_parse():
    p = _profile("{kind: choices, subject: kv_cache_dtype}", "{kind: flag, subject: '--kv-cache-dtype'}",
                 "{kind: choice, subject: kv_cache_dtype, value: fp4, present: false}",
                 "{kind: default, subject: kv_cache_dtype, value: null, snapshot: 'vllm==0.33.0'}")
    clauses = p.facts["values.kv_cache_dtype"].confirm
    assert [c.kind for c in clauses] == ["choices", "flag", "choice", "default"]
    assert clauses[2].describe() == "no choice kv_cache_dtype = 'fp4'"
    assert clauses[3].snapshot == "vllm==0.33.0"
    assert p.confirmable() == ["values.kv_cache_dtype"] and p.evidence_only() == []


@pytest.mark.parametrize("clause,message", [
    ("{kind: flags, subject: '--x'}", "kind"),
    ("{kind: choice, subject: kv_cache_dtype}", "needs 'value'"),
    ("{kind: flag, subject: '--x', value: 1}", "takes no 'value'"),
    ("{kind: choices, subject: kv_cache_dtype, value: fp8}", "list 'value'"),
    ("{kind: flag, subject: '--x', note: y}", "unknown key"),
    ("{kind: flag}", "subject: required key is missing"),
    ("{kind: flag, subject: '--x', snapshot: vllm}", "snapshot"),
])
def test_bad_confirm_clauses_are_rejected(clause, message):
    with pytest.raises(ProfileError) as exc:
        _profile(clause)
    assert message in str(exc.value)


def test_empty_confirm_list_and_choices_on_a_scalar_fact_are_rejected():
    for empty in ("    confirm: []\n", "    confirm:\n"):
        with pytest.raises(ProfileError) as exc:
            parse_profile_text(PROFILE.replace("    confirm:\n", empty))
        assert "'confirm' is empty" in str(exc.value)
    scalar = PROFILE.replace("value: [auto, fp8]", 'value: "--kv-cache-dtype"')
    with pytest.raises(ProfileError) as exc:
        parse_profile_text(scalar + "      - {kind: choices, subject: kv_cache_dtype}\n")
    assert "needs the fact's value to be a list" in str(exc.value)
