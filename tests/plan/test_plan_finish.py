"""`plan` finishes the job: --gpu, host RAM when offloading, checkpoint size, one verdict line,
a readable picture, and an expected gain only where a measurement covers the engine and model class."""

from __future__ import annotations

import json
import math

import pytest

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, DEEPSEEK_E2E, EXAMPLE_SPECS, MEGATRON_FP8, MOE, REPO, patched, require

SPEC_8B = str(REPO / "specs" / "qwen3-8b.yaml")


def plan_json(*args) -> dict:
    proc = run_cli_here("plan", *args, "-f", "json")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def plan_of(validate):
    from fp8spec.plan import build_memory_plan
    from fp8spec.rules.plan_columns import judged

    def run(*patches):
        result = validate(patched(BASE_SPEC, *patches))
        return judged(build_memory_plan(result.context), result.context)

    return run


# --- --gpu -------------------------------------------------------------------------------------------------


def test_gpu_override_plans_the_recorded_cuda_memory():
    from fp8spec.hardware import gpu_table

    data = plan_json(SPEC_8B, "--gpu", "h200")
    assert data["gpu"]["name"] == "h200"
    assert data["gpu"]["total_memory"]["value"] == 143156 * 2**20  # CUDA's 139.8 GiB, not the 141 GB spec sheet
    assert round(data["gpu"]["total_memory"]["value"] / 2**30, 1) == 139.8
    text = run_cli_here("plan", SPEC_8B, "--gpu", "H200")
    assert text.returncode == 0 and "8 x h200, 139.80 GiB per GPU" in text.stdout
    assert "retargeted (hardware.gpu h100 -> h200)" in text.stderr
    assert set(gpu_table()) >= {"h100", "h200", "a100"}


def test_gpu_override_is_checked_by_every_rule_and_refuses_unknown_names():
    a100 = run_cli_here("plan", SPEC_8B, "--gpu", "a100")  # no FP8 tensor cores: the spec's FP8 rollout is an error
    assert a100.returncode == 1 and "HW002" in a100.stderr
    unknown = run_cli_here("plan", SPEC_8B, "--gpu", "h999")
    assert unknown.returncode == 2 and "--gpu 'h999' is not a GPU fp8spec knows" in unknown.stderr
    assert "h200" in unknown.stderr and "Traceback" not in unknown.stderr


# --- host RAM, checkpoint ----------------------------------------------------------------------------------


def test_host_ram_per_node_sums_what_is_offloaded(plan_of):
    base = plan_of()
    assert base.host_ram_per_node is None
    both = plan_of({"training": {"offload": {"params": True, "optimizer": True}}})
    t = both.trainer
    per_gpu = -(-both.model.num_parameters() // 8)
    assert t.host_offload == per_gpu * (4 + 8)  # FSDP fp32 parameter shard + AdamW's two fp32 moments
    assert both.host_ram_per_node == t.host_offload * 8
    optimizer_only = plan_of({"training": {"offload": {"optimizer": True}}})
    assert optimizer_only.host_ram_per_node == per_gpu * 8 * 8
    from fp8spec.plan.render import render_text

    assert "host RAM per node for offloaded state (params + optimizer)" in render_text(both)
    assert "host RAM" not in render_text(base)


def test_megatron_param_offload_copies_parameters_not_gradients(plan_of):
    plan = plan_of(MOE, MEGATRON_FP8, {"training": {"offload": {"params": True}}})
    t = plan.trainer
    assert t.host_offload == t.params and t.grads > 0  # the grad buffer is freed, not copied
    assert plan.host_ram_per_node == t.params * plan.gpus_per_node


def test_checkpoint_size_is_model_plus_optimizer_state(plan_of):
    from fp8spec.profiles import load_profile

    verl = load_profile("verl", "0.9.1")
    assert verl.value("memory.checkpoint_contents") == ["model", "optimizer", "extra"]
    fsdp = plan_of({"trainer": {"keep_checkpoints": 3}})
    n = fsdp.model.num_parameters()
    assert fsdp.trainer.checkpoint_bytes == n * (4 + 8)
    mega = plan_of(MOE, MEGATRON_FP8).trainer
    assert mega.checkpoint_bytes_per_param == 2 + 12  # bf16 model shards + fp32 main params and moments
    from fp8spec.plan.render import plan_json as as_json
    from fp8spec.plan.render import render_text

    text = render_text(fsdp)
    assert f"checkpoint per save: {n * 12 / 2**30:.2f} GiB ({n / 1e9:.2f}B parameters x 12 bytes" in text
    assert f"{3 * n * 12 / 2**30:.2f} GiB with the newest 3 kept" in text
    data = as_json(fsdp)["checkpoint"]
    assert data["per_save"]["value"] == n * 12 and data["kept"]["value"] == 3


# --- one verdict line --------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=lambda p: p.name)
def test_exactly_one_verdict_line(spec):
    proc = run_cli_here("plan", str(spec))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("verdict: ")]
    assert len(lines) == 1 and proc.stdout.rstrip().endswith(lines[0])
    assert lines[0] in ("verdict: fits",) or lines[0].startswith(("verdict: fits (warning: ", "verdict: does not"))
    assert json.loads(run_cli_here("plan", str(spec), "-f", "json").stdout)["verdict"] == lines[0][len("verdict: "):]


def test_verdict_says_does_not_fit_with_the_failing_checks(write_spec, plan_of):
    proc = run_cli_here("plan", str(write_spec(patched(BASE_SPEC, DEEPSEEK_E2E))))
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("verdict: ")]
    assert line.startswith("verdict: does not fit: MEM001 trainer-state-exceeds-gpu"), line
    from fp8spec.plan.render import verdict_line

    assert verdict_line(plan_of()) == "fits (warning: MEM004 heavy-preemption)"  # preempts, but fits
    assert plan_json(SPEC_8B, "--gpu", "h200")["verdict"] == "fits"


def test_only_a_plan_the_rules_judged_is_printed(validate):
    """The planner imports no rule: the rule names and checked fixes a printed plan shows come from the rules that
    judged it, so a plan they did not judge is refused rather than printed without them."""
    from fp8spec.plan import build_memory_plan
    from fp8spec.plan.render import render_text, verdict_line
    from fp8spec.rules.plan_columns import judged

    ctx = validate(patched(BASE_SPEC, DEEPSEEK_E2E)).context
    plan = build_memory_plan(ctx)
    with pytest.raises(ValueError, match="judged"):
        render_text(plan)
    printed = judged(plan, ctx)
    assert verdict_line(printed).startswith("does not fit: MEM001 trainer-state-exceeds-gpu")
    assert "    fix: " in render_text(printed)


# --- expected gain -----------------------------------------------------------------------------------------


def test_gain_only_where_a_measurement_covers_engine_and_model_class():
    from fp8spec.plan.gain import expected_gain

    assert expected_gain("vllm", "Qwen3ForCausalLM", True, True) is not None
    assert expected_gain("vllm", "Qwen3MoeForCausalLM", True, False) is not None
    assert expected_gain("sglang", "Qwen3ForCausalLM", True, True) is not None  # docs/results.md#rollout-throughput
    assert expected_gain("sglang", "Qwen3ForCausalLM", False, True) is None  # FP8 KV alone: not run on SGLang
    assert expected_gain("vllm", "DeepseekV3ForCausalLM", True, False) is None
    assert expected_gain("vllm", "LlamaForCausalLM", True, False) is None
    qwen = {r["choice"]: r for r in plan_json(SPEC_8B)["rollout"]}
    assert qwen["fp8"]["expected_gain"]["low"]["value"] == 0.10 and qwen["fp8"]["expected_gain_status"] == "measured"
    assert "docs/results.md#rollout-throughput" in qwen["fp8"]["expected_gain"]["source"]
    # SGLang's figures are SGLang's own (docs/results.md#rollout-throughput), not vLLM's
    sglang = {r["choice"]: r for r in plan_json(str(REPO / "specs" / "qwen3-8b-sglang.yaml"))["rollout"]}
    assert sglang["fp8"]["expected_gain"]["low"]["value"] == 0.08 and sglang["fp8"]["expected_gain_status"] == "measured"
    assert "docs/results.md#rollout-throughput" in sglang["fp8"]["expected_gain"]["workload"]
    # FP8 KV on SGLang: the one-request tail of max_num_seqs 256 (low) and PAR015's fix (high), both measured
    assert (sglang["fp8_kv"]["expected_gain"]["low"]["value"], sglang["fp8_kv"]["expected_gain"]["high"]["value"]) == (
        0.11,
        0.40,
    )
    text = run_cli_here("plan", str(REPO / "specs" / "qwen3-8b-sglang.yaml")).stdout
    row = next(line for line in text.splitlines() if "expected rollout speed-up" in line)
    assert row.split()[-2:] == ["8%", "11%-40%"]


def test_no_gain_for_a_column_the_rules_refuse(write_spec):
    """On an A100 (no FP8 tensor cores) a BF16 spec's FP8 columns are refused, so no gain is shown for them."""
    spec = write_spec(patched(BASE_SPEC, {"hardware": {"gpu": "a100"}, "linear": {"quantize": False},
                                          "kv_cache": {"dtype": "bf16"}}))
    data = plan_json(str(spec))
    by = {r["choice"]: r for r in data["rollout"]}
    assert by["bf16"]["spec_choice"] and by["bf16"]["refused_by"] == []
    assert "HW002" in by["fp8"]["refused_by"] and by["fp8"]["expected_gain"] is None
    assert by["fp8"]["expected_gain_status"].startswith("refused (HW002")
    row = next(line for line in run_cli_here("plan", str(spec)).stdout.splitlines() if "expected rollout" in line)
    assert row.count("refused (") == 2 and "%" not in row


# --- the picture ------------------------------------------------------------------------------------------


def test_response_ticks_never_crowd_and_use_no_separators():
    from fp8spec.plan.plan import response_ticks

    ticks = response_ticks([256, 512, 1024, 2048, 4096, 8192, 16384, 20480, 32768, 38912])
    assert [label for _, label in ticks] == ["256", "512", "1K", "2K", "4K", "8K", "16K", "32K"]
    assert response_ticks([300, 1000, 20000]) == [(300, "300"), (1000, "1000"), (20000, "20000")]
    for (a, _), (b, _) in zip(ticks, ticks[1:]):
        assert math.log2(b) - math.log2(a) >= 0.6


def _labels(axis) -> list:
    return [t for t in axis.get_ticklabels() if t.get_text()]


def test_png_ticks_do_not_overlap_and_an_empty_bar_says_it(plan_of):
    require("matplotlib")
    import matplotlib.pyplot as plt

    from fp8spec.plan.figure import plan_figure
    from fp8spec.plan.plan import DOES_NOT_FIT
    from fp8spec.plan.svg import plan_svg

    # Qwen3-30B-A3B on one rollout GPU at 0.7 of an H100: BF16 weights leave no KV room, FP8 ones do
    plan = plan_of(MOE, {"rollout": {"tp": 1, "gpu_memory_utilization": 0.7}})
    bf16 = next(r for r in plan.rollout if r.choice.key == "bf16")
    assert bf16.kv.tokens == 0 and any(r.kv.tokens > 0 for r in plan.rollout)
    fig = plan_figure(plan)
    try:
        fig.canvas.draw()
        left, right = fig.axes
        labels = _labels(right.xaxis)
        assert labels and not any(ch in t.get_text() for t in labels for ch in ".,")
        boxes = sorted((t.get_window_extent() for t in labels), key=lambda b: b.x0)
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), [t.get_text() for t in labels]
        assert DOES_NOT_FIT in [t.get_text() for t in left.texts]
    finally:
        plt.close(fig)
    assert DOES_NOT_FIT in plan_svg(plan)
    assert DOES_NOT_FIT not in plan_svg(plan_of())
