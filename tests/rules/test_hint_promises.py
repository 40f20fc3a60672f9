"""Every hint is a tested promise: over the example specs and a generated corpus, each `field: value`
that `fp8spec validate` prints in a hint or `fp8spec plan` prints on a fix line is applied to the spec, which is
validated again as a file: the finding it was printed for is gone, no error is added (for a warning's hint, no
warning of a rule in force either: that rule would propose undoing it), and the value is not the one the spec
already has. Deterministic (a
fixed corpus), well under a minute."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from fp8spec.plan.plan import spec_memory_plan
from tests.conftest import BASE_SPEC, EXAMPLE_SPECS, patched
from tests.rules.promises import current, nested, promises, refusals


def _example(path: Path) -> dict:
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("config_path") and not Path(model["config_path"]).is_absolute():
        model["config_path"] = str(path.parent / model["config_path"])
    reward = (data.get("reward") or {}).get("custom_function") or {}
    if reward.get("path") and not Path(reward["path"]).is_absolute():
        reward["path"] = str(path.parent / reward["path"])
    return data


DEEPSEEK = {"model": {"name": "deepseek-ai/DeepSeek-V3", "path": "/models/DeepSeek-V3-bf16",
                      "config_path": None},
            "hardware": {"gpu": "h200", "nodes": 16}, "rollout": {"tp": 8}}


def corpus() -> list[tuple[str, dict]]:
    """The examples, plus the users' reported cases and a grid over what moves the rules: model class, engine,
    KV precision and calibration, memory share, trainer."""
    out = [(p.name, _example(p)) for p in EXAMPLE_SPECS]
    models = {
        "qwen3-8b": {},
        "llama-8b": {"model": {"name": "meta-llama/Llama-3.1-8B", "path": "/models/llama"}},
        "qwen3-30b": {"model": {"name": "Qwen/Qwen3-30B-A3B-Base", "path": "/models/q30"}},
        "dsv3": DEEPSEEK,
    }
    engines = {"vllm": {"rollout": {"engine": "vllm"}}, "sglang": {"rollout": {"engine": "sglang"}}}
    kv = {
        "bf16": {"kv_cache": {"dtype": "bf16"}},
        "fp8-none": {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}},
        "fp8-step": {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
    }
    memory = {"gmu-0.3": {"rollout": {"gpu_memory_utilization": 0.3}},
              "gmu-0.9": {"rollout": {"gpu_memory_utilization": 0.9}}}
    for (m, mp), (e, ep), (k, kp), (g, gp) in itertools.product(
        models.items(), engines.items(), kv.items(), memory.items()
    ):
        out.append((f"{m}-{e}-{k}-{g}", patched(BASE_SPEC, mp, ep, kp, gp)))
    out += [
        ("linear-off-tight", patched(BASE_SPEC, {"rollout": {"tp": 1, "gpu_memory_utilization": 0.25},
                                                 "linear": {"quantize": False}})),
        ("fsdp-70b", patched(BASE_SPEC, {"model": {"name": "meta-llama/Llama-3.1-70B", "path": "/m/l70"},
                                         "rollout": {"tp": 4}})),
        ("dsv3-e2e-4x8", patched(BASE_SPEC, DEEPSEEK, {"hardware": {"nodes": 4},
                                                       "training": {"backend": "megatron", "precision": "fp8",
                                                                    "parallel": {"tp": 8, "pp": 4, "ep": 8}}})),
        ("dsv3-offload-0.7", patched(BASE_SPEC, DEEPSEEK, {"rollout": {"gpu_memory_utilization": 0.7},
                                                           "training": {"offload": {"params": True,
                                                                                    "optimizer": True}}})),
        # no QK-norm: an FP8 KV cache draws KV008, a BF16 one MEM004 (the pair init went back and forth on)
        ("llama-preempting-bf16-kv", patched(BASE_SPEC, models["llama-8b"], {
            "kv_cache": {"dtype": "bf16"},
            "rollout": {"tp": 1, "gpu_memory_utilization": 0.7, "max_model_len": 22528}})),
        ("llama-preempting-fp8-kv", patched(BASE_SPEC, models["llama-8b"], {
            "kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"},
            "rollout": {"tp": 1, "gpu_memory_utilization": 0.7, "max_model_len": 22528}})),
        ("long-micro-batch", patched(BASE_SPEC, {"algorithm": {"use_dynamic_bsz": True,
                                                               "ppo_max_token_len_per_gpu": 22528}})),
    ]
    return out


CORPUS = corpus()


def _errors(validation, severity: str = "error") -> set[tuple[str, str]]:
    return {(d.code, d.path) for d in validation.diagnostics if d.severity == severity}


def _in_force(validation) -> set[tuple[str, str]]:
    """Errors and warnings of rules in force (an acknowledged finding is reported as info)."""
    return _errors(validation) | _errors(validation, "warning")


def _printed(validation) -> list[tuple[str, str, str]]:
    """(code, path, text) of every hint `validate` prints and every fix line `plan` prints."""
    out = [(d.code, d.path, d.hint) for d in validation.diagnostics if d.hint]
    ctx = validation.context
    if ctx is not None and ctx.model is not None:
        from fp8spec.plan.render import fix_lines
        from fp8spec.rules.plan_columns import judged

        plan = spec_memory_plan(ctx)
        if plan is not None:
            plan = judged(plan, ctx)
            paths = {d.code: d.path for d in validation.diagnostics}
            out += [(code, paths.get(code, ""), text) for code, text in fix_lines(plan)]
    return out


STRONG = re.compile(r"\((?:each )?passes every rule\)")


def printed_problems(data: dict, validate) -> list[str]:
    """What is wrong with the promises the hints and fix lines of ``data`` print (empty: every one holds)."""
    before = validate(data)
    spec = before.loaded.spec
    assert spec is not None, [d.render() for d in before.diagnostics]
    problems = []
    severity = {d.code: d.severity for d in before.diagnostics}
    for code, path, text in _printed(before):
        strong = bool(STRONG.search(text))  # 'passes every rule': the changed spec has no finding left at all
        for changes in promises(text, spec):
            same = [f for f, v in changes.items() if current(spec, f) == v]
            if same:
                problems.append(f"{code}: proposes {changes} but {same} already hold that value: {text}")
                continue
            after = validate(patched(data, nested(changes)))
            still = [d for d in after.diagnostics if d.code == code and (d.path == path or not path)]
            # no error; fixing a warning, no warning either: its rule would propose undoing the change (init
            # applies proposals: KV008's bf16 against MEM004's FP8 KV cache went back and forth)
            new = (_errors(after) if severity[code] == "error" else _in_force(after)) - _in_force(before)
            if still or new:
                problems.append(f"{code}: {changes} leaves {code}={bool(still)}, adds {sorted(new)}: {text}")
            elif strong and _in_force(after):
                problems.append(
                    f"{code}: {changes} is labelled 'passes every rule' but leaves {sorted(_in_force(after))}: {text}"
                )
        proposed = promises(text, spec)
        for changes, errors, warns in refusals(text, spec):
            if changes in proposed:
                problems.append(f"{code}: {changes} both refused and proposed: {text}")
            after = validate(patched(data, nested(changes)))
            new = {c for c, _ in _errors(after) - _errors(before)}
            warned = {c for c, _ in _errors(after, "warning") - _errors(before, "warning")}
            if not errors <= new or not warns <= warned:
                problems.append(
                    f"{code}: {changes} said to be refused by {sorted(errors)} and warned of by {sorted(warns)}, "
                    f"adds errors {sorted(new)} and warnings {sorted(warned)}"
                )
    return problems


@pytest.mark.parametrize("name,data", CORPUS, ids=[n for n, _ in CORPUS])
def test_every_printed_proposal_holds(name, data, validate):
    problems = printed_problems(data, validate)
    assert not problems, "\n".join(problems)


def _rule_examples() -> list[tuple[str, dict, dict]]:
    from fp8spec.rules.registry import all_rules

    out = []
    for r in all_rules():
        if r.examples is None:
            continue
        out.append((f"{r.code}-bad", r.examples.bad_spec(), dict(r.examples.files)))
    return out


EXAMPLES = _rule_examples()


@pytest.mark.parametrize("name,data,files", EXAMPLES, ids=[n for n, _, _ in EXAMPLES])
def test_every_printed_proposal_holds_on_the_rule_examples(name, data, files, validate, tmp_path):
    for file, text in files.items():  # beside the spec the validate fixture writes
        (tmp_path / file).write_text(text, encoding="utf-8")
    problems = printed_problems(data, validate)
    assert not problems, "\n".join(problems)


# A generated corpus: the knobs users turned, combined at random (seeded: the same specs every run).
# Bounded so that it stays well under a minute on two cores.
GENERATED_EXAMPLES = 30


def _generated_specs():
    from hypothesis import strategies as st

    models = st.sampled_from([
        {},
        {"model": {"name": "Qwen/Qwen3-14B", "path": "/models/q14"}},
        {"model": {"name": "meta-llama/Llama-3.1-8B", "path": "/models/llama"}},
        {"model": {"name": "Qwen/Qwen3-30B-A3B-Base", "path": "/models/q30"}},
    ])
    kv = st.sampled_from([
        {"kv_cache": {"dtype": "bf16"}},
        {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "none"}},
        {"kv_cache": {"dtype": "fp8_e4m3", "recalibrate": "per_step"}},
    ])
    rollout = st.fixed_dictionaries({
        "tp": st.sampled_from([1, 2, 4]),
        "gpu_memory_utilization": st.sampled_from([0.15, 0.3, 0.6, 0.9]),
        "max_response_length": st.sampled_from([2048, 20480]),
        "sync_bucket_mb": st.sampled_from([2048, 65536]),
    }).map(lambda r: {"rollout": r})
    linear = st.sampled_from([{}, {"linear": {"block_size": [128, 96]}}])
    training = st.sampled_from([
        {},
        {"training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 2}}},
        {"training": {"backend": "megatron", "precision": "fp8", "parallel": {"tp": 2, "ep": 3}}},
    ])
    hardware = st.sampled_from([{}, {"hardware": {"nodes": 2}}])
    return st.tuples(models, kv, rollout, linear, training, hardware).map(lambda parts: patched(BASE_SPEC, *parts))


def test_every_printed_proposal_holds_on_a_generated_corpus(tmp_path_factory):
    from hypothesis import HealthCheck, given, settings

    from fp8spec.rules.runner import validate_path
    from tests.conftest import dump_yaml

    folder = tmp_path_factory.mktemp("generated")

    def validate(data: dict):
        path = folder / "spec.yaml"
        path.write_text(dump_yaml(data), encoding="utf-8")
        return validate_path(path)

    @settings(max_examples=GENERATED_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(_generated_specs())
    def check(data):
        if validate(data).loaded.spec is None:  # a combination the schema refuses: nothing is proposed
            return
        problems = printed_problems(data, validate)
        assert not problems, "\n".join(problems)

    check()
