"""Quoting: Hydra overrides parse back to the exact typed value; shell words survive bash unchanged."""

from __future__ import annotations

import subprocess

import pytest

from fp8spec.quoting import hydra_override, shell_word

NASTY = ["plain", "with space", "it's", 'dq"uote', "back\\slash", "semi;colon", "$(touch /tmp/pwned)",
         "`id`", "a,b", "[x]", "{k: v}", "null", "true", "1e5", "0.5_2.0", "~", "a=b", "#hash", "!bang", "é ü",
         "end\\", "bs\\'q", "\\\\'x", "''", "'"]


@pytest.mark.parametrize("value", NASTY)
def test_hydra_string_round_trip(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(hydra_override("a.b", value))
    assert parsed.value() == value and isinstance(parsed.value(), str)


@pytest.mark.parametrize("value", [0, 7, 2.0, 1e-06, 0.6, True, False, None, [1, 2], ["a", "b c"],
                                   {"quantization_config": {"ignored_layers": ["m.x", "m.y"], "weight_block_size": [128, 128]}}])
def test_hydra_typed_round_trip(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(hydra_override("a.b", value, "+"))
    got = parsed.value()
    assert got == value and type(got) is type(value)
    assert parsed.is_add()


@pytest.mark.parametrize("word", NASTY + ["actor.x='y'", "+a.b=['c']"])
def test_shell_word_round_trip(word, tmp_path):
    marker = tmp_path / "pwned"
    script = f"printf '%s' {shell_word(word)}"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert out == word
    assert not marker.exists()


def test_dict_keys_must_be_identifiers():
    with pytest.raises(ValueError):
        hydra_override("a", {"bad key": 1})


# --- any Unicode: the escaping writers on their own (the spec refuses many of these characters first) ------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LINE_BREAKERS = "\u2028\u2029\x85\r\n\x0b\x0c"
ANY_TEXT = st.text(st.one_of(st.characters(exclude_categories=()),
                             st.sampled_from(LINE_BREAKERS + "\u202e\ufeff\ufffe\x7f\x9b'\"\\#:")),
                   max_size=40)


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT)
def test_yaml_scalar_reads_back_exactly_in_yaml_1_1_and_1_2(value):
    """A value in a YAML comment-free line, a list item and a mapping value reads back exactly, and no
    character a YAML 1.1 reader takes as a line break is written raw."""
    import yaml as pyyaml
    from ruamel.yaml import YAML

    from fp8spec.quoting import json_scalar, yaml_string_list, yaml_string_map

    scalar = json_scalar(value)
    assert not any(ch in scalar for ch in LINE_BREAKERS)
    # indent the list's lines (a replace of "- " would also rewrite a value holding "- ", as hypothesis found)
    items = "".join("  " + line for line in yaml_string_list([value]).splitlines(keepends=True))
    text = f"# {scalar}\nk: {scalar}\nl:\n" + items + "m:\n" + yaml_string_map({value: value}, indent=2)
    expected = {"k": value, "l": [value], "m": {value: value}}
    assert pyyaml.safe_load(text) == expected
    assert YAML(typ="safe", pure=True).load(text) == expected


@pytest.mark.parametrize("value", ["0\n", "a.b\n", "x\n\n", "plain"])
def test_shell_word_a_final_newline_is_not_plain(value):
    """Found by the property below: Python's ``$`` matched before a final newline, so "0\n" went out bare
    and split the generated script's line."""
    word = shell_word(value)
    assert word.isprintable() and (word == value) == value.isalnum()
    out = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True, check=True,
                         env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}).stdout
    assert out == value.encode()


@settings(max_examples=100, deadline=None)
@given(ANY_TEXT.filter(lambda s: "\x00" not in s))
def test_shell_word_reads_back_exactly_in_bash(value):
    word = shell_word(value)
    assert word.isprintable(), "no raw control, bidi or line-separator character in a generated script"
    out = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True, check=True,
                         env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}).stdout
    assert out == value.encode("utf-8", "surrogatepass")


@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=30))
def test_hydra_string_round_trip_any_text(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(hydra_override("a.b", value))
    assert parsed.value() == value
