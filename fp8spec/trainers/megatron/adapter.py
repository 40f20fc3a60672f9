"""Megatron-core + TransformerEngine: parallel layout and end-to-end FP8 training through verl's overrides."""

from __future__ import annotations

from fp8spec.compiler.adapters.verl import VerlKeys, add
from fp8spec.compiler.settings import SettingsPlan
from fp8spec.plan.precision_layout import cutlass_experts_unused
from fp8spec.resolve.valid import ValidSpec


def build_megatron(plan: SettingsPlan, ctx: ValidSpec, keys: VerlKeys) -> None:
    spec = ctx.spec
    t = spec.training
    p = t.parallel
    for fact_id, value, field in (
        ("key.megatron_tp", p.tp, "tp"),
        ("key.megatron_pp", p.pp, "pp"),
        ("key.megatron_ep", p.ep, "ep"),
        ("key.megatron_cp", p.cp, "cp"),
    ):
        add(plan, keys, fact_id, value, f"training.parallel.{field}", f"Megatron {field} size")
    layout = ctx.megatron
    if layout.etp is not None:
        why = (
            "expert tensor parallel size"
            if p.etp is not None
            else "expert tensor parallel 1 for MoE with ep > 1 (verl's null means etp = tp, and then etp*ep*pp = "
            f"{p.tp}*{p.ep}*{p.pp} must divide the {layout.world} GPUs)"
        )
        add(plan, keys, "key.megatron_etp", layout.etp, "training.parallel.etp", why)
    tc = keys.key("key.megatron_transformer_override")
    opt = keys.key("key.megatron_optimizer_override")
    mc = ctx.profile("megatron-core")
    stage_layers: int | None
    for stage_layers, field, fact_id in (
        (p.first_stage_layers, "first_stage_layers", "field.num_layers_in_first_pipeline_stage"),
        (p.last_stage_layers, "last_stage_layers", "field.num_layers_in_last_pipeline_stage"),
    ):
        if stage_layers is not None:
            _mc(
                plan,
                keys,
                mc,
                tc,
                fact_id,
                stage_layers,
                f"training.parallel.{field}",
                "decoder layers on that pipeline stage; the other stages split the rest evenly",
            )
    if t.bridge == "mbridge":
        add(
            plan,
            keys,
            "key.megatron_vanilla_mbridge",
            True,
            "training.bridge",
            "build the model and export its weights with mbridge (verl's Megatron-Bridge pin is not on PyPI)",
        )
    if t.attention in ("fused", "unfused"):
        _mc(
            plan,
            keys,
            mc,
            tc,
            "field.attention_backend",
            t.attention,
            "training.attention",
            f"TransformerEngine's {'cuDNN fused' if t.attention == 'fused' else 'unfused'} attention instead of "
            "verl's default flash (which needs the flash-attn package on every node)",
        )
    if t.router_replay != "disabled":
        add(
            plan,
            keys,
            "key.megatron_router_replay_mode",
            t.router_replay,
            "training.router_replay",
            "replay MoE routes in the actor update: R2 from the trainer's old-log-prob pass, R3 from the rollout",
        )
        if t.router_replay == "R3":
            add(
                plan,
                keys,
                "key.rollout_routing_replay",
                True,
                "training.router_replay",
                "R3: the rollout engine returns the experts it routed each token to",
            )
    if t.precision == "fp8":
        _mc(
            plan,
            keys,
            mc,
            tc,
            "field.fp8",
            t.fp8_recipe,
            "training.fp8_recipe",
            "TransformerConfig.fp8: hybrid = E4M3 forward, E5M2 gradients",
        )
        _mc(
            plan,
            keys,
            mc,
            tc,
            "field.fp8_recipe",
            t.fp8_scaling,
            "training.fp8_scaling",
            "TransformerConfig.fp8_recipe: how TE scales FP8 tensors",
        )
        _mc(
            plan,
            keys,
            mc,
            opt,
            "optimizer.fp8_recipe",
            t.fp8_scaling,
            "training.fp8_scaling",
            "OptimizerConfig.fp8_recipe: the distributed optimizer must know the recipe too (verl #6893)",
        )
        first, last = spec.linear.bf16_first_layers, spec.linear.bf16_last_layers
        if first or last:
            _mc(
                plan,
                keys,
                mc,
                tc,
                "field.first_last_layers_bf16",
                True,
                "linear.bf16_first_layers",
                "keep the first/last layers in BF16 in training too",
            )
            _mc(
                plan,
                keys,
                mc,
                tc,
                "field.num_layers_at_start_in_bf16",
                first,
                "linear.bf16_first_layers",
                "BF16 layers at the start",
            )
            _mc(
                plan,
                keys,
                mc,
                tc,
                "field.num_layers_at_end_in_bf16",
                last,
                "linear.bf16_last_layers",
                "BF16 layers at the end",
            )
        if t.fp8_scaling == "blockwise":
            te = ctx.profile("transformer-engine")
            env = te.value("env.block_scaling_fp32_scales")
            name = env["name"] if isinstance(env, dict) else env
            env_value = "1" if spec.linear.scale_dtype == "fp32" else "0"
            plan.add(
                "env",
                name,
                env_value,
                "linear.scale_dtype",
                "FP32 block scales in TE (read when transformer_engine is imported, so it must be in every "
                "worker's environment)"
                if env_value == "1"
                else "power-of-two block scales in TE",
                te.evidence("env.block_scaling_fp32_scales"),
            )
    if t.precision == "fp8" and t.bf16_modules:
        _layout_notes(plan, ctx, mc)
    if t.expert_gemm == "cutlass":
        te = ctx.profile("transformer-engine")
        env = te.value("env.cutlass_grouped_gemm")
        plan.add(
            "env",
            env["name"],
            "1",
            "training.expert_gemm",
            "one CUTLASS grouped GEMM for the BF16 experts on Hopper instead of one cuBLAS GEMM per expert (read at "
            "every grouped GEMM, in each worker's environment)",
            te.evidence("env.cutlass_grouped_gemm"),
        )
    elif not cutlass_experts_unused(ctx.spec, ctx.model, ctx.resolved.gpu):
        from fp8spec.plan.facts import measured

        plan.notes.append(
            "the experts train in BF16 with one cuBLAS GEMM per expert: training.expert_gemm: cutlass ran the BF16 "
            f"Qwen3-30B-A3B stack {measured('grouped_gemm.qwen3_30b_a3b.bf16_speedup')}x faster on an H200 "
            "(measured:grouped_gemm.qwen3_30b_a3b.bf16_speedup; a 4-layer stack, not yet a training loop)"
        )
    if ctx.model.is_moe and t.router_dtype == "fp32":
        _mc(
            plan,
            keys,
            mc,
            tc,
            "field.moe_router_dtype",
            "fp32",
            "training.router_dtype",
            "route in FP32 in the trainer",
        )


def _mc(
    plan: SettingsPlan, keys: VerlKeys, mc, group: str, fact_id: str, value, source: str, why: str
) -> None:
    """A Megatron config field (its name from the megatron-core profile) under verl's override group."""
    key = f"{group}.{mc.value(fact_id)['name']}"
    plan.add("hydra", key, value, source, why, mc.evidence(fact_id), keys.needs_plus(key))


def _layout_notes(plan: SettingsPlan, ctx: ValidSpec, mc) -> None:
    """What a per-module layout does beyond its settings: a class trained in another precision than the rollout
    runs it, and the FP8 padding BF16 experts still pay."""
    from fp8spec.plan.precision_layout import class_mismatches, mismatch_text

    t = ctx.spec.training
    if text := mismatch_text(class_mismatches(ctx.resolved)):
        plan.notes.append(text)
    if "experts" in t.bf16_modules and ctx.model.is_moe:
        pad = mc.value("moe.fp8_expert_padding")
        plan.notes.append(
            f"the experts train in BF16 but the FP8 config still pads each expert's tokens to a multiple of "
            f"{pad['tokens_per_expert_multiple']} ({mc.evidence('moe.fp8_expert_padding')})"
        )
