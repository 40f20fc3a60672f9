"""Every value a hint proposes passes every rule: applied to the spec file, validated again from scratch.

The rules compute their proposals by re-running all rules on each candidate (fp8spec.rules.proposals); this
test re-checks each one the way a user would, by writing the changed spec and validating the file.
"""

from __future__ import annotations

import pytest

from fp8spec.rules.registry import all_rules, get_rule
from tests.conftest import BASE_SPEC, MEGATRON_FP8, MOE, patched
from tests.rules.promises import nested

# Rules whose bad example must come with at least one proposal.
PROPOSING = {"BLK001", "HW001", "HW003", "HW004", "HW006", "MDL002", "MEM002", "MEM003", "MEM005", "MEM006", "PAR001", "PAR002",
             "PAR004", "PAR006", "PAR008", "PAR010", "PAR011", "PAR012"}




def _findings(validation, code):
    return list(get_rule(code).check(validation.context))


def _errors(validation) -> set[tuple[str, str]]:
    return {(d.code, d.path) for d in validation.errors}


def _warnings(validation) -> set[tuple[str, str]]:
    return {(d.code, d.path) for d in validation.warnings}


def _check_proposals(validate, data: dict, code: str) -> int:
    before = validate(data)
    findings = _findings(before, code)
    assert findings, f"{code} did not fire"
    checked = 0
    for finding in findings:
        for changes in finding.proposals:
            after = validate(patched(data, nested(changes)))
            errors = _errors(after)
            assert (code, finding.path) not in errors, (code, changes, "does not fix the finding")
            new = errors - _errors(before)
            assert not new, (code, changes, "adds", new)
            if get_rule(code).severity != "error":  # a warning is not traded for another one (it would be undone)
                warned = _warnings(after) - _warnings(before)
                assert not warned, (code, changes, "adds warnings", warned)
            at_changed = {e for e in errors if any(e[1] == f or e[1].startswith(f + ".") for f in changes)}
            assert not at_changed, (code, changes, "leaves", at_changed)
            checked += 1
    return checked


@pytest.mark.parametrize("code", [r.code for r in all_rules()])
def test_proposals_pass_every_rule(code, validate, tmp_path):
    examples = get_rule(code).examples
    for name, text in examples.files.items():  # beside the spec the validate fixture writes
        (tmp_path / name).write_text(text, encoding="utf-8")
    checked = _check_proposals(validate, examples.bad_spec(), code)
    if code in PROPOSING:
        assert checked, f"{code}'s hint proposes nothing for its bad example"


def test_blk001_does_not_propose_a_tp_par002_refuses(validate):
    """The reported case: TP 16 shards Qwen3-30B-A3B's experts on whole blocks but exceeds an 8-GPU node."""
    data = patched(BASE_SPEC, MOE, {"hardware": {"nodes": 2}, "rollout": {"tp": 4}})
    found = _findings(validate(data), "BLK001")
    # MEM004 stays at either tp: the hint promises BLK001 gone and no error added, not a clean spec
    assert found and found[0].hint == "set rollout.tp: 1 or 2 (each clears BLK001, adds no error)"
    assert {c["rollout.tp"] for c in found[0].proposals} == {1, 2}
    assert _check_proposals(validate, data, "BLK001") == 2 * len(found)


def test_hw001_on_an_a100_proposes_no_fp8_recipe(validate):
    """The reported case: mxfp8 on an A100 used to suggest 'blockwise on Hopper'; no FP8 recipe runs there."""
    data = patched(BASE_SPEC, MEGATRON_FP8, {"hardware": {"gpu": "a100"}, "linear": {"quantize": False},
                                             "training": {"fp8_scaling": "mxfp8"}})
    (found,) = _findings(validate(data), "HW001")
    assert found.proposals == ({"training.precision": "bf16"},)
    assert "blockwise" not in found.hint and "training.precision: bf16" in found.hint
    # on a Hopper GPU the same finding proposes the recipe that works there
    (hopper,) = _findings(validate(patched(data, {"hardware": {"gpu": "h100"}})), "HW001")
    assert {"training.fp8_scaling": "blockwise"} in hopper.proposals


def test_hints_are_about_their_own_quantity(validate):
    ep = _findings(validate(patched(BASE_SPEC, MOE, {"rollout": {"tp": 2, "ep": 3}})), "PAR002")
    assert ep and ep[0].path == "rollout.ep" and ep[0].hint.startswith("set rollout.ep:")
    batches = {"algorithm": {"train_batch_size": 16, "ppo_mini_batch_size": 32, "use_dynamic_bsz": False}}
    mini = _findings(validate(patched(BASE_SPEC, batches)), "PAR004")
    assert mini and mini[0].path == "algorithm.ppo_mini_batch_size"
    assert mini[0].hint.startswith("set algorithm.ppo_mini_batch_size: 16")
    tp3 = {"training": {"parallel": {"tp": 3}}}
    layout = _findings(validate(patched(BASE_SPEC, MEGATRON_FP8, tp3)), "PAR001")
    # tp 1, 2 and 4 divide the GPUs too, but leave the trainer's state (TE's FP8 weight copies and the memory
    # measured beyond it included) no room beside the engine (MEM003)
    assert layout and layout[0].hint.startswith("set training.parallel.tp: 8 ")


def test_ref001_hint_follows_the_field_in_error(validate, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    (found,) = _findings(validate(patched(BASE_SPEC, {"model": {"config_path": str(bad)}})), "REF001")
    assert found.path == "model.config_path" and "set model.config_path" not in found.hint
    (unknown,) = _findings(validate(patched(BASE_SPEC, {"model": {"name": "my/model"}})), "REF001")
    assert unknown.path == "model.name" and "fp8spec models" in unknown.hint


def test_no_passing_value_names_the_rules_that_refuse_the_fixes(validate):
    """PAR009 on 24 GPUs: ep 1, 2, 4, 8 divide the experts and the GPUs but each leaves the trainer's state
    too large beside the engine; the hint says so instead of proposing them."""
    # an engine share at which ep 24's state fits beside the engine (its kept memory as measured) and ep 8's not
    data = patched(BASE_SPEC, MOE, {"training": {"backend": "megatron", "precision": "fp8",
                                                 "parallel": {"tp": 1, "ep": 24}}, "hardware": {"nodes": 3},
                    "rollout": {"gpu_memory_utilization": 0.45}})
    (found,) = _findings(validate(data), "PAR009")
    assert not found.proposals
    assert found.hint.startswith("no single change passes every rule: training.parallel.ep: 4 or 8 "
                                 "(then MEM003 refuses the spec); ")
    assert "training.parallel.ep: 1 or 2 (then MEM001 and MEM003 refuse the spec)" in found.hint
    offloaded = patched(data, {"training": {"offload": {"params": True, "optimizer": True}}})
    (found,) = _findings(validate(offloaded), "PAR009")
    assert {"training.parallel.ep": 8} in found.proposals
    assert _check_proposals(validate, offloaded, "PAR009")
