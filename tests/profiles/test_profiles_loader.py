"""The profile loader: lookup, caching, sorting and clear errors for missing or malformed profiles."""

from __future__ import annotations

import textwrap

import pytest

import fp8spec.profiles.loader as loader
from fp8spec.profiles import (
    KINDS,
    ProfileError,
    ProfileNotFound,
    UnknownFact,
    available_versions,
    clear_cache,
    load_profile,
    parse_profile_text,
    version_key,
)

GOOD = textwrap.dedent(
    """\
    kind: vllm
    version: "9.9.9"
    source:
      package: "vllm==9.9.9"
      artifact: "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
      sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    facts:
      flag.kv_cache_dtype:
        value: "--kv-cache-dtype"
        evidence: "vllm/engine/arg_utils.py:1 (EngineArgs.kv_cache_dtype)"
      flag.calculate_kv_scales:
        value: null
        evidence: "removed"
    """
)


DUPLICATE = "  flag.calculate_kv_scales:\n    value: 1\n    evidence: x\n"


@pytest.fixture
def fake_backends(tmp_path, monkeypatch):
    """A private backends/ folder; profiles written into it are what the loader sees."""
    monkeypatch.setattr(loader, "backends_root", lambda: tmp_path)
    clear_cache()
    yield tmp_path
    clear_cache()


def write(root, kind, name, text):
    folder = root / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def test_api_on_real_profile():
    p = load_profile("vllm", "0.33.0")
    assert (p.kind, p.version) == ("vllm", "0.33.0")
    assert p.source.package == "vllm==0.33.0"
    assert p.value("flag.kv_cache_dtype") == "--kv-cache-dtype"
    assert "arg_utils.py" in p.evidence("flag.kv_cache_dtype")
    assert p.has("capability.online_block_fp8")
    assert not p.has("capability.does_not_exist")
    assert p.value("flag.calculate_kv_scales") is None  # recorded as absent, not omitted


def test_profiles_are_cached_and_values_are_copies():
    a = load_profile("vllm", "0.24.0")
    assert load_profile("vllm", "0.24.0") is a
    got = a.value("values.kv_cache_dtype")
    got.append("bogus")
    assert "bogus" not in a.value("values.kv_cache_dtype")


def test_unknown_fact_names_profile_and_fact():
    p = load_profile("vllm", "0.24.0")
    with pytest.raises(UnknownFact) as exc:
        p.value("flag.nope")
    assert "vllm 0.24.0" in str(exc.value) and "flag.nope" in str(exc.value)
    assert isinstance(exc.value, KeyError)


def test_unknown_version_lists_available_versions():
    with pytest.raises(ProfileNotFound) as exc:
        load_profile("vllm", "0.1.0")
    err = exc.value
    assert (err.kind, err.version) == ("vllm", "0.1.0")
    assert err.available == available_versions("vllm")
    msg = str(err)
    assert "\n" not in msg
    assert "0.1.0" in msg and "0.24.0" in msg and "0.33.0" in msg


def test_unknown_kind_lists_kinds():
    with pytest.raises(ProfileNotFound) as exc:
        load_profile("tensorrt", "1.0.0")
    assert "unknown backend kind" in str(exc.value)
    for kind in KINDS:
        assert kind in str(exc.value)
    with pytest.raises(ProfileNotFound):
        available_versions("tensorrt")


def test_available_versions_sorted_numerically():
    assert available_versions("vllm") == ["0.24.0", "0.33.0"]
    assert available_versions("sglang") == ["0.5.12", "0.5.23"]
    got = sorted(["0.5.12", "0.5.9", "0.10.0", "0.5.23"], key=version_key)
    assert got == ["0.5.9", "0.5.12", "0.5.23", "0.10.0"]
    assert version_key("2.3.0.dev0") < version_key("2.3.0")


def test_loader_reads_a_new_profile_file(fake_backends):
    write(fake_backends, "vllm", "9.9.9.yaml", GOOD)
    write(fake_backends, "vllm", "notes.txt", "ignored")
    assert available_versions("vllm") == ["9.9.9"]
    assert load_profile("vllm", "9.9.9").value("flag.kv_cache_dtype") == "--kv-cache-dtype"


def test_snapshots_folder_is_not_a_kind(fake_backends):
    write(fake_backends, "snapshots", "vllm-0.33.0.json", "{}")
    with pytest.raises(ProfileNotFound):
        load_profile("snapshots", "0.33.0")


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda t: t.replace("  flag.calculate_kv_scales:\n    value: null\n    evidence: \"removed\"\n",
                             "  flag.calculate_kv_scales:\n    value: null\n    evidence: \"   \"\n"),
         "facts.flag.calculate_kv_scales.evidence"),
        (lambda t: t.replace('    evidence: "removed"\n', ""),
         "facts.flag.calculate_kv_scales.evidence: required key is missing"),
        (lambda t: t.replace("    value: null\n", ""), "no 'value' key"),
        (lambda t: t + "extra_top: 1\n", "extra_top: unknown key"),
        (lambda t: t.replace('    evidence: "removed"\n', '    evidence: "removed"\n    note: "x"\n'),
         "facts.flag.calculate_kv_scales.note: unknown key"),
        (lambda t: t.replace("kind: vllm", "kind: tensorrt"), "kind:"),
        (lambda t: t.replace('sha256: "0000', 'sha256: "ZZZZ'), "source.sha256"),
        (lambda t: t.replace("flag.kv_cache_dtype:", "Flag.KV:"), "facts.Flag.KV"),
        (lambda t: t.replace('value: "--kv-cache-dtype"', "value: 2020-01-01"), "not plain YAML data"),
        (lambda t: t.replace('value: "--kv-cache-dtype"', "value: .inf"), "non-finite"),
        (lambda t: t.replace("facts:\n", "facts:\n" + DUPLICATE, 1),
         "not valid YAML"),  # duplicate key
        (lambda t: t.replace("facts:", "facts: [\n"), "not valid YAML"),
        (lambda t: "- just\n- a list\n", "top level must be a mapping"),
    ],
)
def test_malformed_profile_text_gives_clear_error(mutate, expected):
    text = mutate(GOOD)
    assert text != GOOD
    with pytest.raises(ProfileError) as exc:
        parse_profile_text(text, "backends/vllm/9.9.9.yaml")
    msg = str(exc.value)
    assert msg.startswith("malformed backend profile backends/vllm/9.9.9.yaml")
    assert expected in msg, msg


def test_good_text_parses():
    p = parse_profile_text(GOOD)
    assert p.ids("flag.") == ["flag.calculate_kv_scales", "flag.kv_cache_dtype"]


def test_file_must_match_folder_and_name(fake_backends):
    write(fake_backends, "sglang", "9.9.9.yaml", GOOD)  # says kind: vllm
    with pytest.raises(ProfileError) as exc:
        load_profile("sglang", "9.9.9")
    assert "does not match its folder 'sglang'" in str(exc.value)
    write(fake_backends, "vllm", "9.9.8.yaml", GOOD)  # says version 9.9.9
    with pytest.raises(ProfileError) as exc:
        load_profile("vllm", "9.9.8")
    assert "does not match its file name '9.9.8'" in str(exc.value)


def test_malformed_file_on_disk_names_the_file(fake_backends):
    write(fake_backends, "vllm", "9.9.9.yaml", GOOD.replace("facts:", "fact:"))
    with pytest.raises(ProfileError) as exc:
        load_profile("vllm", "9.9.9")
    msg = str(exc.value)
    assert str(fake_backends / "vllm" / "9.9.9.yaml") in msg
    assert "facts: required key is missing" in msg and "fact: unknown key" in msg
