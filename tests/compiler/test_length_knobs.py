"""rollout.max_model_len / max_num_seqs / max_num_batched_tokens in the standalone serve commands: the spec's
values under each engine's own flag names (checked against the engine's snapshot), the old defaults without."""

from __future__ import annotations

import pytest

from tests.conformance.checks import check_argv, compile_variant
from tests.conftest import SPECS

KNOBS = {"rollout": {"max_model_len": 22528, "max_num_seqs": 64, "max_num_batched_tokens": 4096}}


def _flag(argv: list[str], flag: str):
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize(
    "stem,backend,flags",
    [
        ("qwen3-8b", "vllm", ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens")),
        ("qwen3-8b-sglang", "sglang", ("--context-length", "--max-running-requests", "--chunked-prefill-size")),
    ],
)
def test_serve_command_carries_the_knobs(stem, backend, flags, tmp_path):
    compiled = compile_variant(SPECS / f"{stem}.yaml", backend, KNOBS, tmp_path, label="knobs")
    argv = compiled.argv
    assert [_flag(argv, f) for f in flags] == ["22528", "64", "4096"]
    version = getattr(compiled.spec.stack, backend)
    assert check_argv(argv, backend, version) == []
    # without them: the context is prompt + response and the engine keeps its own batch defaults
    plain = compile_variant(SPECS / f"{stem}.yaml", backend, {}, tmp_path, label="plain").argv
    total = compiled.spec.rollout.max_prompt_length + compiled.spec.rollout.max_response_length
    assert [_flag(plain, f) for f in flags] == [str(total), None, None]
