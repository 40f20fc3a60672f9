"""`fp8spec init --acknowledge CODE` is honoured: init keeps the acknowledged warning instead of applying a fix for
it, says what it kept and what it did not apply, and never drops an --acknowledge without a word."""

from __future__ import annotations

import re

from fp8spec.starter import starter_spec

MOE_2X8_H100 = ("moe-megatron", "Qwen/Qwen3-30B-A3B-Base", "h100", 2, 8)


def _init(tmp_path, *acknowledge: str):
    return starter_spec(*MOE_2X8_H100, file=str(tmp_path / "spec.yaml"), spec_dir=tmp_path,
                        acknowledge=acknowledge)


def test_an_acknowledged_warning_is_kept_not_fixed(tmp_path):
    result = _init(tmp_path, "MEM004", "TRN007")
    spec = result.validation.loaded.spec
    assert result.clean, [d.render() for d in result.validation.diagnostics]
    assert spec.rollout.max_num_seqs is None, result.changes  # the concurrency cap was not applied
    assert "MEM004" in spec.acknowledge and "TRN007" in spec.acknowledge
    assert not any("(MEM004" in change for change in result.changes), result.changes
    kept = [note for note in result.kept if note.startswith("MEM004")]
    assert kept and "--acknowledge MEM004" in kept[0] and "did not apply rollout.max_num_seqs" in kept[0], kept


def test_an_applied_throughput_cost_is_said_with_the_way_to_keep_it(tmp_path):
    result = _init(tmp_path, "TRN007")
    capped = [c for c in result.changes if c.startswith("rollout.max_num_seqs")]
    assert capped, result.changes
    assert re.search(r"\(MEM004: concurrency 256 -> \d+ per replica \(-\d+ %\), est\. rollout throughput -\d+ %; "
                     r"`--acknowledge MEM004` keeps the warning instead\)", capped[0]), capped[0]


def test_an_acknowledge_init_does_not_write_is_named(tmp_path):
    result = _init(tmp_path, "TRN007", "KV008")
    spec = result.validation.loaded.spec
    assert "KV008" not in spec.acknowledge
    assert any(note.startswith("--acknowledge KV008:") for note in result.not_acknowledged), result.not_acknowledged


def test_every_acknowledge_is_either_written_or_named(tmp_path):
    from fp8spec.rules.registry import all_rules

    codes = tuple(r.code for r in all_rules() if r.acknowledgeable)
    result = _init(tmp_path, *codes)
    written = set(result.validation.loaded.spec.acknowledge)
    named = {note.split(":", 1)[0].removeprefix("--acknowledge ") for note in result.not_acknowledged}
    assert written | named == set(codes) and not written & named, (written, named)
