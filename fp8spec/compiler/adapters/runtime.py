"""The fp8spec runtime patch set: which patches a spec needs and how the bundle activates them."""

from __future__ import annotations

from fp8spec.compiler.adapters.engine import engine_adapter
from fp8spec.compiler.adapters.verl import VerlKeys, add_engine_arg
from fp8spec.compiler.settings import SettingsPlan
from fp8spec.patchset import manifest, shipped_fileset
from fp8spec.resolve.sync_path import sync_quantizer
from fp8spec.resolve.valid import ValidSpec
from fp8spec.runtime import envs
from fp8spec.trainers import get_trainer


def needed_patches(ctx: ValidSpec) -> dict[str, str]:
    """Patch name -> the spec field that needs it."""
    spec = ctx.spec
    needed: dict[str, str] = {}
    if spec.kv_cache.fp8 and not ctx.native_kv_calibration():
        needed["kv_scales"] = "kv_cache.recalibrate"
    if spec.linear.quantize and spec.linear.scale_dtype == "ue8m0":
        needed["ue8m0_scales"] = "linear.scale_dtype"
    quantizer = sync_quantizer(ctx)
    if quantizer == "fp8spec":
        needed["fast_block_quant"] = "linear.sync_quantizer"
    elif quantizer == "direct":
        needed["direct_sync"] = "linear.sync_quantizer"
    if spec.training.precision == "fp8":
        needed["te_report"] = "training.precision"
        if spec.training.bf16_modules and get_trainer(spec.training.backend).fp8_training:
            needed["module_precision"] = "training.bf16_modules"
        stateless = ctx.fact("transformer-engine", "checkpoint.stateless_recipes", [])
        splits = ctx.fact("megatron-core", "checkpoint.grouped_splits_stateless_extra_state", True)
        if ctx.model.is_moe and spec.training.fp8_scaling in stateless and splits is False:
            needed["te_extra_state_compat"] = "training.fp8_scaling"
    if get_trainer(spec.training.backend).bridge and spec.training.bridge == "mbridge":
        members = ctx.fact("megatron-core", "enum.model_type", {}).get("members", [])
        if "encoder_and_decoder" not in members:
            needed["mbridge_compat"] = "training.bridge"
    # verl's sync trainer ends each generation on its replay buffer's next poll (profile fact loop.sync_sample_poll)
    poll = ctx.fact("verl", "loop.sync_sample_poll", {})
    if (
        poll
        and not poll.get("set_by_trainer", True)
        and poll["poll_interval_s"] > envs.REPLAY_POLL_S.read({})
    ):
        needed["replay_poll"] = "trainer"
    return needed


def build_runtime(plan: SettingsPlan, ctx: ValidSpec, keys: VerlKeys) -> None:
    """Activate the needed patches in a verl bundle (standalone serving has no weight sync to patch)."""
    needed = needed_patches(ctx)
    if not needed:
        return
    m = manifest()
    names = sorted(needed)
    sources = ", ".join(needed[n] for n in names)
    for name in names:
        plan.add(
            "patch",
            name,
            f"{m.PATCHSET_NAME}=={m.PATCHSET_VERSION}",
            needed[name],
            m.PATCHES[name]["description"],
        )
    plan.add(
        "env",
        envs.RUNTIME_PATCHES.name,
        ",".join(names),
        sources,
        f"activates {m.PATCHSET_NAME} patches in every Ray worker",
    )
    if "kv_scales" in needed and ctx.spec.kv_cache.recalibrate == "once":
        plan.add(
            "env",
            envs.KV_RECALIBRATE.name,
            "once",
            "kv_cache.recalibrate",
            "keep the first q/k/v scales computed from real rollout data and push them at every sync "
            "(vLLM's calculate_kv_scales calibrates on its profiling dummy run; docs/results.md#kv-scales)",
        )
    if "module_precision" in needed:
        mc = ctx.profile("megatron-core")
        plan.add(
            "env",
            envs.BF16_MODULES.name,
            ",".join(ctx.spec.training.bf16_modules),
            "training.bf16_modules",
            "TransformerEngine runs these module classes in BF16 (megatron-core's per-module quant_recipe, built "
            "in the trainer: verl's override_transformer_config cannot carry the RecipeConfig object)",
            mc.evidence("field.quant_recipe"),
        )
    verl = ctx.profile("verl")
    plan.add(
        "env",
        verl.value("env.external_modules"),
        m.MODULE,
        sources,
        "verl imports the listed modules in every process that imports verl (verl/__init__.py), vLLM's "
        "worker processes included; the bundle's activation does not use vLLM's plugin entry point",
        verl.evidence("env.external_modules"),
    )
    # The patch set travels with the bundle (lib/fp8spec), never through pip on the nodes.
    shipped = shipped_fileset()
    plan.py_modules = [shipped["py_module"]]
    plan.py_modules_key = keys.key("key.ray_runtime_env_py_modules")
    engine = ctx.engine
    for name in names:
        for fact_id, value in engine_adapter(engine.name).patch_engine_args(name).items():
            add_engine_arg(
                plan,
                keys,
                ctx,
                fact_id,
                list(value) if isinstance(value, tuple) else value,
                needed[name],
                f"registers patch {name} in {engine.name}",
                "",
            )
