"""Quoting: Hydra overrides parse back to the exact typed value; shell words survive bash unchanged."""

from __future__ import annotations

import subprocess

import pytest

from fp8spec.compiler.quoting import hydra_override, shell_word

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
