"""Is FP8 paying as planned: the engine's KV capacity against `fp8spec plan`'s, each weight sync against the
run's own steady state and the run's syncs against the plan's sync time, generation throughput against the
planner's expected speed-up over a BF16 baseline."""

from __future__ import annotations

import statistics
from typing import Iterable

from fp8spec.report.names import thresholds
from fp8spec.report.phases import steady, steady_tokens_per_s
from fp8spec.report.steps import whole_syncs
from fp8spec.report.verdicts.unit import Context, verdict

Found = Iterable[tuple[str, str]]


@verdict(
    "RPT030",
    "kv-capacity-below-plan",
    "warning",
    "The engine's KV cache holds fewer tokens than fp8spec plan predicted for the spec.",
    """fp8spec plan predicts the engine's "GPU KV cache size" from the spec (weights, utilization, KV dtype);
    the real 4B run came within 0.2 %. Markedly less means the engine had less memory than planned (another
    process on the GPU, the trainer not offloaded, a BF16 KV cache where FP8 was planned), so fewer sequences run
    at once and requests may be preempted. Limit: fp8spec/data/report_thresholds.yaml (kv_capacity).""",
    "check the engine's kv_cache_dtype and gpu_memory_utilization in its start-up line, and what else holds "
    "GPU memory while it starts (nvidia-smi)",
    needs="plan",
    example=(
        "the real 4B run with its engine's KV line at 1,051,808 tokens, against its spec",
        "KV cache 1,051,808 tokens, 78% of the 1,354,656 fp8spec plan predicts",
        "the real 4B run against its spec (99.8 % of the plan)",
    ),
)
def kv_below_plan(ctx: Context) -> Found:
    assert ctx.plan is not None
    ratio = float(thresholds()["kv_capacity"]["min_ratio"])
    for e in ctx.run.of("kv_cache_size"):
        got, want = int(e.groups["tokens"]), ctx.plan.kv_cache_tokens
        if got < ratio * want:
            yield (
                str(e.loc),
                f"KV cache {got:,} tokens, {got / want:.0%} of the {want:,} fp8spec plan predicts",
            )


@verdict(
    "RPT031",
    "weight-sync-stall",
    "warning",
    "A weight sync took several times the run's usual sync time.",
    """After the first sync (which also builds buffers and the sync plan) each sync moves the same bytes the same
    way, so its time is steady (0.35 s every step in the 4B run). A step far above the run's median is a stall:
    memory pressure on the host, a fallback path for some tensors, or contention on the GPU. RPT033 compares the
    syncs with fp8spec plan's time instead. Limit: fp8spec/data/report_thresholds.yaml (weight_sync).""",
    "compare the step's sync line of the patch set with the others (its split: trainer fill, GPU wait, engine)",
    example=(
        "the real tiny FSDP + vLLM run with step 4's sync 20 times slower",
        "step 4: weight sync 4.01 s, 20.9x the run's median 0.192 s",
        "the real tiny FSDP + vLLM run",
    ),
)
def sync_stall(ctx: Context) -> Found:
    factor = float(thresholds()["weight_sync"]["max_ratio_to_median"])
    times = [(r, r.sync_s) for r in ctx.rows if r.sync_s is not None]
    steady = [t for _, t in times[1:]]
    if len(steady) < 2:
        return
    median = statistics.median(steady)
    for r, t in times[1:]:
        if median > 0 and t > factor * median:
            yield (
                r.where,
                f"step {r.step}: weight sync {t:.3g} s, {t / median:.1f}x the run's median {median:.3g} s",
            )


@verdict(
    "RPT033",
    "weight-sync-slower-than-plan",
    "warning",
    "The run's weight syncs took much longer than fp8spec plan predicted for the spec.",
    """fp8spec plan predicts one sync's time for the spec's sync path from the syncs measured on the same engine,
    trainer and GPU (fp8spec/data/weight_sync.yaml): bytes or tensors sent, plus the offloaded trainer's copy to
    the GPU; the real 4B run's syncs came within 15 % of it. Far slower syncs mean the run does not sync as
    planned: another sync path than the spec's (verl's per-tensor quantizer instead of the direct path), a
    trainer that is offloaded where the spec keeps it on the GPU, slow host memory or contention on the GPU.
    Compared: the median of the whole syncs from step 2 on (the sync_timing patch's sent line, else the direct
    path's engine line). Limit:
    fp8spec/data/report_thresholds.yaml (weight_sync_plan).""",
    "check the sync path the run's patch lines name against the spec's (fp8spec report --bundle), and the sync's "
    "split in its sent line (trainer fill, GPU wait, engine)",
    needs="plan",
    example=(
        "the real 4B run with its syncs from step 2 on 3 times slower, against its spec",
        "weight sync 1.06 s (median from step 2 on), 3.5x the 0.308 s fp8spec plan predicts (the direct path)",
        "the real 4B run against its spec (1.15x the plan)",
    ),
)
def sync_slower_than_plan(ctx: Context) -> Found:
    assert ctx.plan is not None
    planned = ctx.plan.sync_s
    syncs = whole_syncs(ctx.run, ctx.rows)
    if planned is None or not syncs:
        return
    limits = thresholds()["weight_sync_plan"]
    got = statistics.median(t for _, t, _ in syncs)
    if got > float(limits["max_ratio"]) * planned and got - planned > float(limits["min_excess_s"]):
        slowest = max(syncs, key=lambda s: s[1])
        yield (
            slowest[2],
            f"weight sync {got:.3g} s (median from step 2 on), {got / planned:.1f}x the {planned:.3g} s "
            f"fp8spec plan predicts ({ctx.plan.sync_path})",
        )


@verdict(
    "RPT032",
    "generation-below-expected",
    "warning",
    "Generation throughput gained less over the BF16 baseline than fp8spec plan expects.",
    """fp8spec plan states the rollout speed-up the spec's FP8 choice is expected to bring over BF16, with its
    source (the paper and the project's measurements). Measured against a BF16 run of the same workload
    (--baseline), a smaller gain means FP8 is not paying as planned: a kernel fallback (no DeepGEMM, FlashInfer
    instead of FA3), a KV cache that is not FP8, or a workload too short for the gain. The measured gains came
    from BF16 engines that preempted: where the BF16 engine holds every sequence of the step, FP8 measured +0.6 %
    in the RL loop (real_step.window_base.fp8kv_gen_gain), and the message says so. Compared over the steady
    steps (from step 2 on), as the step line: step 1 also compiles the engine's first-use kernels.""",
    "check the engine's start-up line (quantization, kv_cache_dtype, attention backend) and the response lengths; "
    "where the BF16 engine holds every sequence (fp8spec plan's 'sequences at' row), FP8 gains little: run more "
    "sequences per replica or longer responses",
    needs="baseline",
    example=(
        "the real 4B run against a baseline 10 % slower, with its spec",
        "+10%, below the +39% fp8spec plan expects",
        "the real 4B run against a baseline 50 % slower",
    ),
)
def generation_below(ctx: Context) -> Found:
    assert ctx.plan is not None and ctx.baseline is not None
    low = ctx.plan.gain_low
    _, run = steady_tokens_per_s(ctx.rows)
    _, base = steady_tokens_per_s(ctx.baseline)
    if low is None or not run or not base:
        return
    gain = statistics.mean(run) / statistics.mean(base) - 1
    if gain < low:
        yield (
            ctx.rows[-1].where,
            (
                f"generation {statistics.mean(run):,.0f} tok/s against the baseline's {statistics.mean(base):,.0f}: "
                f"{gain:+.0%}, below the {low:+.0%} fp8spec plan expects ({ctx.plan.choice})"
                + (f"; {ctx.plan.gain_caveat}" if ctx.plan.gain_caveat else "")
            ),
        )


@verdict(
    "RPT034",
    "generation-rounded-by-poll",
    "warning",
    "Every step's generation ended just after a multiple of 2 s: verl's loop waited for its next poll.",
    """verl's sync trainer (the default) times generation around its replay buffer's sample, which sleeps 2 s
    between looks for finished rollouts, so each step loses the time from the engine's last token to the next
    look: up to 2 s, 1 s on average, whatever the rollout's speed. An FP8 rollout gain smaller than that
    disappears from the step, and a tiny model's generation reads 2 s however fast it is. The runtime patch
    replay_poll (every bundle fp8spec compiles for verl) looks every 0.1 s and logs one line; a run without that
    line whose generation times all end within 0.15 s past a multiple of 2 s was rounded. Limit:
    fp8spec/data/report_thresholds.yaml (poll_rounding).""",
    "launch the bundle fp8spec compiled (FP8SPEC_RUNTIME_PATCHES includes replay_poll); for an older bundle, add "
    "replay_poll to FP8SPEC_RUNTIME_PATCHES in its runtime env",
    example=(
        "the real 4B run (2026-12-03)",
        "generation ended 0.09-0.13 s past a multiple of 2 s in all 3 steps (10.09, 10.12, 8.13 s): verl's "
        "replay buffer looked for finished rollouts every 2 s",
        "the real 4B run with each generation time 1 s longer, as an unrounded loop would give",
    ),
)
def generation_rounded_by_poll(ctx: Context) -> Found:
    limits = thresholds()["poll_rounding"]
    if ctx.run.of("replay_poll"):
        return
    period, near = float(limits["period_s"]), float(limits["max_distance_s"])
    rows = [r for r in ctx.rows if r.gen_s is not None]
    past = [r.gen_s % period for r in rows if r.gen_s is not None]
    if len(rows) < int(limits["min_steps"]) or not all(p <= near for p in past):
        return
    times = ", ".join(f"{r.gen_s:.2f}" for r in rows)
    yield (
        rows[-1].where,
        f"generation ended {min(past):.2f}-{max(past):.2f} s past a multiple of {period:g} s in all {len(rows)} "
        f"steps ({times} s): verl's replay buffer looked for finished rollouts every {period:g} s",
    )


@verdict(
    "RPT035",
    "update-unpacked",
    "warning",
    "The update dominates the step at micro-batches far smaller than fp8spec plan fits.",
    """The actor update's GEMMs get as many rows as a micro-batch has tokens: at one sequence per micro-batch
    (the compiled default) a Qwen3-30B-A3B layer's experts see about 140 tokens each, and the real-size runs
    updated at verl MFU 0.025-0.11 with the update 55-69 % of the step (docs/results.md#real-size-rl-step).
    Where the trainer attends each packed sequence on its own (Megatron; FSDP with flash_attention_2 or
    flex_attention), fp8spec plan gives the largest token budget that leaves a measured share of the GPU free
    (its packing line). A run whose update is a large share of the steady steps while that budget is several
    times the spec's is leaving the GPU's rows unused, and with it whatever the rollout's FP8 gain could show in
    the step. The plan's activation estimate above one sequence is not measured yet. Limit:
    fp8spec/data/report_thresholds.yaml (unpacked_update).""",
    "set algorithm.ppo_max_token_len_per_gpu toward the plan's packing budget (a multiple of one sequence below "
    "it keeps a margin), run a step and compare the update time and the trainer's peak memory",
    needs="plan",
    example=(
        "the real 4B run (2026-12-03) against its spec with training.attention flash_attention_2",
        "of the steady steps at micro-batches of up to 5,120 tokens; fp8spec plan fits",
        "the real 4B run against its own spec (sdpa: packing attends a dense mask, so the plan gives no budget)",
    ),
)
def update_unpacked(ctx: Context) -> Found:
    assert ctx.plan is not None
    limits = thresholds()["unpacked_update"]
    own, room = ctx.plan.update_budget, ctx.plan.packing_budget
    if not own or room < float(limits["min_budget_ratio"]) * own:
        return
    rows = [r for r in steady(ctx.rows) if r.update_s and r.step_s]
    if not rows:
        return
    update, step = sum(r.update_s or 0.0 for r in rows), sum(r.step_s or 0.0 for r in rows)
    if update < float(limits["min_update_share"]) * step:
        return
    yield (
        rows[-1].where,
        f"the update is {update / step:.0%} of the steady steps at micro-batches of up to {own:,} tokens; "
        f"fp8spec plan fits {room:,} (algorithm.ppo_max_token_len_per_gpu, {room / own:.1f}x)",
    )
