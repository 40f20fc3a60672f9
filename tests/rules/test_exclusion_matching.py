"""linear.exclude is matched in linear time, once per spec: the same answers as Python's re for every
pattern it accepts, a bounded amount of work whatever the pattern (counted, not timed), a located error for
what cannot be bounded, and no per-probe re-resolution. Timings are in benchmarks/bench_validate_bounds.py."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fp8spec.exclusions as exclusions
from fp8spec.catalog import get_model
from fp8spec.catalog._types import ModelFacts
from fp8spec.exclusions.name_match import MAX_STEPS, Budget, Pattern, PatternError, match, name_index
from tests.conftest import BASE_SPEC, patched

QWEN = get_model("Qwen/Qwen3-30B-A3B-Base")
# A sample with every family of the MoE model and many numbers (names are not the thing varied here).
NAMES = [n for n in QWEN.module_names() if ".experts." not in n or int(n.split(".experts.")[1].split(".")[0]) < 12]
INDEX = name_index(NAMES)
TOTAL_RUNS = sum(len(re.findall(r"\d+|\D+", n)) for n in NAMES)
KEY_RUNS = sum(len(key) for key, _, _ in INDEX.families)


def reference(text: str) -> set[str]:
    """The documented meaning, with Python's backtracking re (fine on these short patterns)."""
    if text.startswith("re:"):
        pattern = re.compile(text[3:])
    else:
        body = "".join(".*" if c == "*" else "[^.]" if c == "?" else re.escape(c) for c in text)
        pattern = re.compile(rf"(?:.*\.)?{body}")
    return {n for n in NAMES if pattern.fullmatch(n)}


def matched(text: str, budget: Budget | None = None) -> set[str]:
    return {INDEX.names[i] for i in match(Pattern(text), INDEX, budget or Budget())}


# Pieces of real names, numbers and wildcards: globs that hit, miss and straddle components.
GLOB_PIECES = ["*", "?", ".", "mlp", "gate", "_proj", "experts", "layers", "self_attn", "q", "1", "0", "47", "x"]
globs = st.lists(st.sampled_from(GLOB_PIECES), min_size=1, max_size=8).map("".join)
REGEX_PIECES = [
    r".*", r"\.", r"\d+", r"\d", r"[0-9]{1,2}", r"(gate|up)_proj", r"mlp", r"experts", r"layers", r"\w+",
    r"[^.]*", r"(a|ab)*", r"model", r"proj$", r"^model", r"(?:q|k|v)_proj", r"x?",
]
# (Nested repeats such as (\w+\.?)+ are left to the catastrophic cases below: the reference, Python's re, would
# take hours on them.)
regexes = st.lists(st.sampled_from(REGEX_PIECES), min_size=1, max_size=6).map(lambda ps: "re:" + "".join(ps))


@settings(max_examples=150, deadline=None)
@given(globs)
def test_globs_match_as_documented(text):
    assert matched(text) == reference(text)


@settings(max_examples=150, deadline=None)
@given(regexes)
def test_regexes_match_as_python_does(text):
    try:
        re.compile(text[3:])
    except re.error:
        return
    try:
        got = matched(text)
    except PatternError as err:  # a documented refusal ('^' or '$' inside the pattern), never a wrong answer
        assert "not supported in exclusions" in str(err)
        return
    assert got == reference(text)


@settings(max_examples=150, deadline=None)
@given(st.one_of(globs, regexes, st.lists(st.sampled_from(["*", "?", "X", "."]), min_size=1, max_size=40).map("".join)))
def test_work_is_linear_in_the_names_whatever_the_pattern(text):
    """Each name's runs are read at most once per pattern (plus one pass over the family keys), and the
    automaton stays small: the cost cannot grow with backtracking."""
    budget = Budget()
    try:
        pattern = Pattern(text)
        match(pattern, INDEX, budget)
    except PatternError:
        return
    assert MAX_STEPS - budget.left <= TOTAL_RUNS + KEY_RUNS
    assert len(pattern._sets) <= 4 * len(text) + 8


GATES = {n for n in NAMES if n.endswith(".gate")}
CATASTROPHIC = {  # pattern -> what it matches (Python's re would take seconds to hours per name)
    "**********X": set(),
    "*" * 40 + "X": set(),
    r"re:(\w+\.?)+\.gate": GATES,
    "re:(.*)(.*)(.*)(.*)(.*)X": set(),
    "re:(.*)(.*)(.*)(.*)(.*)gate": GATES,
    "re:(x+x+)+y": set(),
}


@pytest.mark.parametrize("text", sorted(CATASTROPHIC))
def test_catastrophic_backtracking_patterns_cost_one_pass(text):
    budget = Budget()
    assert matched(text, budget) == CATASTROPHIC[text]
    assert MAX_STEPS - budget.left <= TOTAL_RUNS + KEY_RUNS


@pytest.mark.parametrize(
    "text, why",
    [
        (r"re:(a*)b\1", "a backreference cannot be matched in linear time"),
        ("re:(?=x)mlp", "a lookahead or lookbehind cannot be matched in linear time"),
        ("re:(?i)MLP", "inline flags"),
        ("re:(?>a*)b", "an atomic group"),
        ("re:a*+b", "a possessive repeat"),
        ("re:.{0,100000}", "too large to match"),
        (r"re:mlp\b", "an anchor or word boundary"),
        ("re:(unclosed", "invalid regex"),
    ],
)
def test_patterns_that_cannot_be_bounded_are_refused_with_the_reason(validate, text, why):
    result = validate(patched(BASE_SPEC, {"linear": {"exclude": [text]}}))
    (finding,) = [d for d in result.diagnostics if d.code == "EXC001"]
    assert why in finding.message and finding.path == "linear.exclude.0"


def test_past_the_step_bound_is_a_located_error_not_a_long_run(validate):
    """Patterns that need every name read, many times over, stop at MAX_STEPS with EXC001 on the patterns
    past it (the others keep their answer)."""
    spec = patched(BASE_SPEC, {"model": {"name": "deepseek-ai/DeepSeek-V3"}, "linear": {"exclude": ["*1*"] * 40}})
    result = validate(spec)
    found = [d for d in result.diagnostics if d.code == "EXC001"]
    assert found and all("takes more than" in d.message for d in found), [d.message for d in found]
    assert len(found) < 40, "the first patterns were matched"


def test_exclusions_are_resolved_once_per_spec_and_modules_walked_a_fixed_number_of_times(validate, monkeypatch):
    """Rules and hint probes share one resolution: each pattern is compiled and matched once, and the model's
    module list is walked a fixed number of times, not once per probe (9x per pattern x module)."""
    counts = {"patterns": 0, "walks": 0}
    real_pattern, real_walk = exclusions.Pattern, ModelFacts.linear_modules

    class Counted(real_pattern):  # the real matcher, counted
        def __init__(self, text):
            counts["patterns"] += 1
            super().__init__(text)

    def walk(self, *args, **kwargs):
        counts["walks"] += 1
        return real_walk(self, *args, **kwargs)

    monkeypatch.setattr(exclusions, "Pattern", Counted)
    monkeypatch.setattr(ModelFacts, "linear_modules", walk)
    for cached in (exclusions._matched, exclusions._index, exclusions._quantized):
        cached.cache_clear()
    from fp8spec.linear_classes import _structure, engine_modules

    _structure.cache_clear()
    engine_modules.cache_clear()
    patterns = ["*.mlp.gate", "model.layers.1?.self_attn.*", r"re:.*experts\.7\.down_proj"]
    # rollout.tp 8 on Qwen3-30B-A3B: BLK001 and the memory rules probe several candidate fixes
    spec = patched(BASE_SPEC, {"model": {"name": "Qwen/Qwen3-30B-A3B-Base"}, "rollout": {"tp": 8},
                               "linear": {"exclude": ["router", *patterns]}})
    result = validate(spec)
    assert result.diagnostics, "the spec exercises the rules' probes"
    assert counts["patterns"] == len(patterns)
    assert counts["walks"] <= 8, counts


def test_a_model_config_over_the_expert_bound_is_refused(tmp_path, validate):
    """R05: 4096 layers x 488 experts used to be validated for 11 minutes in 4 GB."""
    import json

    config = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
        "num_key_value_heads": 4, "num_experts": 488, "num_experts_per_tok": 8, "num_hidden_layers": 4096,
        "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 32768,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = validate(patched(BASE_SPEC, {"model": {"name": "local/m", "config_path": str(path)}}))
    (finding,) = [d for d in result.diagnostics if d.severity == "error"]
    assert "implausibly large (limit 32768 expert blocks)" in finding.message
