"""Details of the Megatron layout, batching and reward-file rules beyond their trigger/quiet pair."""

from __future__ import annotations

import os

import pytest

from tests.conftest import BASE_SPEC, MOE, patched


def _found(validation, code):
    return [d for d in validation.diagnostics if d.code == code]


def _megatron(**parallel):
    return {"training": {"backend": "megatron", "precision": "fp8", "parallel": parallel}}


def test_etp_defaults_to_1_for_moe_with_ep(validate):
    # tp 2, ep 8 on 8 GPUs: with verl's null etp (= tp) megatron-core needs 2*8*1 = 16 GPUs
    result = validate(patched(BASE_SPEC, MOE, _megatron(tp=2, ep=8)))
    assert not _found(result, "PAR001"), [d.render() for d in result.diagnostics]
    assert result.context.megatron.etp == 1


def test_etp_set_to_tp_is_refused_with_working_values(validate):
    found = _found(validate(patched(BASE_SPEC, MOE, _megatron(tp=2, ep=8, etp=2))), "PAR001")
    assert found and "etp*ep*pp = 2*8*1 = 16" in found[0].message
    # the spec keeps its memory findings (MEM003, MEM006): the hint promises only PAR001 gone and no error added
    assert "training.parallel.etp: 1" in found[0].hint and "(each clears PAR001, adds no error)" in found[0].hint
    assert found[0].path == "training.parallel.etp"


def test_dense_model_leaves_etp_to_megatron(validate):
    result = validate(patched(BASE_SPEC, _megatron(tp=2)))
    assert result.context.megatron.etp is None and result.context.megatron.expert_tp == 2


def test_uneven_stages_that_do_not_split_are_refused(validate):
    found = _found(validate(patched(BASE_SPEC, _megatron(tp=1, pp=8, first_stage_layers=10, last_stage_layers=10))),
                   "PAR008")
    assert found and "16 middle layers are not divisible by the 6 middle stages" in found[0].message
    assert "training.parallel.first_stage_layers: 6, training.parallel.last_stage_layers: 6" in found[0].hint


def test_first_and_last_stage_on_pp1_builds_a_wrong_model(validate):
    found = _found(validate(patched(BASE_SPEC, _megatron(tp=1, pp=1, first_stage_layers=18, last_stage_layers=10))),
                   "PAR008")
    assert found and "would build 10 layers" in found[0].message


def test_budget_counts_context_parallel(validate):
    ok = patched(BASE_SPEC, _megatron(tp=2, cp=2), {"algorithm": {"ppo_max_token_len_per_gpu": 11264}})
    assert not _found(validate(ok), "PAR012")
    low = patched(ok, {"algorithm": {"ppo_max_token_len_per_gpu": 11000}})
    found = _found(validate(low), "PAR012")
    assert found and "11000 x cp 2 = 22000" in found[0].message and "at least 11264" in found[0].message


def test_log_prob_budget_is_checked_on_its_own(validate):
    found = _found(validate(patched(BASE_SPEC, {"algorithm": {"log_prob_max_token_len_per_gpu": 4096}})), "PAR012")
    assert [d.path for d in found] == ["algorithm.log_prob_max_token_len_per_gpu"]


def test_dynamic_batching_defaults_hold_one_sequence(validate):
    b = validate(patched(BASE_SPEC)).context.batching
    assert b.dynamic and b.ppo_max_token_len_per_gpu == 2048 + 20480
    assert b.log_prob_max_token_len_per_gpu == b.ref_log_prob_max_token_len_per_gpu == 22528


def test_r3_counts_as_moe_correction(validate):
    spec = patched(BASE_SPEC, MOE, _megatron(tp=2, ep=8), {"training": {"router_replay": "R3"},
                                                          "correction": {"method": "none"},
                                                          "acknowledge": {"COR001": "R3 ablation"}})
    assert not _found(validate(spec), "MOE003")


@pytest.mark.parametrize("name,content,text", [
    ("reward.txt", "def compute_score(**kw): return 0\n", "not a Python file"),
    ("missing.py", None, "reward file not found"),
    ("broken.py", "def compute_score(:\n", "Python syntax error"),
    ("latin1.py", b"# \xe9\ndef compute_score(**kw): return 0\n", "not UTF-8"),
])
def test_reward_file_problems(validate, tmp_path, name, content, text):
    if content is not None:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    found = _found(validate(patched(BASE_SPEC, {"reward": {"custom_function": {"path": name}}})), "RWD004")
    assert found and text in found[0].message and found[0].path == "reward.custom_function.path"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_reward_file_fifo_is_refused_without_reading(validate, tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    found = _found(validate(patched(BASE_SPEC, {"reward": {"custom_function": {"path": "pipe.py"}}})), "RWD004")
    assert found and "not a regular file" in found[0].message


def test_reward_file_relative_to_spec(validate, tmp_path):
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "math.py").write_text("from math import isclose as compute_score\n")
    result = validate(patched(BASE_SPEC, {"reward": {"custom_function": {"path": "rewards/math.py"}}}))
    assert not _found(result, "RWD004")
    assert result.context.reward_file.text.startswith("from math import")


def test_checkpoint_dir_must_be_absolute(validate):
    result = validate(patched(BASE_SPEC, {"trainer": {"checkpoint_dir": "checkpoints/run"}}))
    assert any(d.path == "trainer.checkpoint_dir" and "absolute path" in d.message for d in result.errors)


def test_deepseek_v3_e2e_on_4x8_h200_is_refused_with_fixes(validate):
    """The issue's DeepSeek-V3 end-to-end spec that used to validate with 0 warnings."""
    spec = patched(BASE_SPEC, {"model": {"name": "deepseek-ai/DeepSeek-V3", "path": "/models/DeepSeek-V3"},
                               "hardware": {"gpu": "h200", "nodes": 4, "gpus_per_node": 8},
                               "training": {"backend": "megatron", "precision": "fp8",
                                            "parallel": {"tp": 8, "pp": 4, "ep": 8}},
                               "rollout": {"tp": 8}})
    result = validate(spec)
    codes = {d.code for d in result.errors}
    assert {"PAR008", "MDL001"} <= codes
    assert "PAR001" not in codes  # etp defaults to 1: 1*8*4 = 32 GPUs
    par008 = next(d for d in result.errors if d.code == "PAR008")
    assert "num_layers 61 is not divisible by pp 4" in par008.message
    assert "first_stage_layers: 16, training.parallel.last_stage_layers: 15" in par008.hint
