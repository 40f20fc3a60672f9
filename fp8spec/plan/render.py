"""A plan as data (every number with its unit) and as a readable table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fp8spec.engines import get_engine
from fp8spec.plan.engine_memory import memory_model
from fp8spec.plan.facts import engine_beyond_share, estimate_basis
from fp8spec.plan.gain import capacity_note, gain_source, running_caveat
from fp8spec.plan.packing import packing_note, packing_room
from fp8spec.plan.sync import DATA as SYNC_DATA

if TYPE_CHECKING:
    from fp8spec.plan.plan import MemoryPlan
    from fp8spec.plan.verdict import PlanRules

GIB = 1 << 30


def q(value: Any, unit: str, status: str | None = None) -> dict:
    out = {"value": value, "unit": unit}
    if status:
        out["status"] = status
    return out


def _fraction(x: float) -> float:
    return round(x, 6)


def _rollout_json(plan, r) -> dict:
    m, kv = r.memory, r.kv
    gain = plan.gain(r)
    return {
        "choice": r.choice.key,
        "label": r.choice.label,
        "spec_choice": r.is_spec,
        "weights": {k: q(v, "bytes", "exact") for k, v in r.weights.as_dict().items()},
        "memory": {
            "requested": q(m.requested, "bytes", "exact"),
            "weights": q(m.weights, "bytes", "exact"),
            "activation_peak": q(m.activation_peak, "bytes", "estimate"),
            "non_torch": q(m.non_torch, "bytes", "estimate"),
            "cuda_graph_estimate": q(m.cudagraph, "bytes", "estimate"),
            "load_cache": q(m.load_cache, "bytes", "estimate"),
            "available_kv": q(m.available_kv, "bytes", "estimate"),
            "runner": m.runner,
        },
        "kv_cache": {
            "dtype": r.choice.kv_dtype,
            "bytes_per_token_per_layer": q(kv.bytes_per_token_layer, "bytes", "exact"),
            "bytes_per_token": q(kv.bytes_per_token, "bytes", "exact"),
            "layers": q(kv.layers, "layers", "exact"),
            "block_size": q(kv.block_size, "tokens", "exact"),
            "num_blocks": q(kv.num_blocks, "blocks", "estimate"),
            "capacity": q(kv.tokens, "tokens", "estimate"),
            "max_concurrency_at_max_model_len": q(_fraction(kv.max_concurrency), "sequences", "estimate"),
            "sequence_length": q(r.seq_len, "tokens", "exact"),
            "concurrent_sequences_at_sequence_length": q(_fraction(r.concurrency), "sequences", "estimate"),
        },
        "step": {
            "sequences_per_replica": q(r.sequences_per_replica, "sequences", "exact"),
            "running_sequences": q(r.running, "sequences", "exact"),
            "fits_without_preemption": r.fits_without_preemption,
            "kv_shortfall": r.kv_shortfall,
        },
        "expected_gain": None
        if gain is None
        else {
            "low": q(gain.low, "fraction"),
            "high": q(gain.high, "fraction"),
            "workload": gain.workload,
            "source": gain.source,
        },
        "expected_gain_status": plan.gain_text(r) if gain is None else "measured",
        "refused_by": list(plan.refusal(r)),
    }


_LAYOUT_UNITS = {"busiest_stage": "stage index", "stage_layers": "layers"}


def _trainer_json(plan: MemoryPlan, t) -> dict | None:
    if t is None:
        return None
    room = packing_room(plan, t)
    b = lambda v, s="estimate": q(v, "bytes", s)  # noqa: E731
    return {
        "backend": t.backend,
        "precision": t.precision,
        "offload": t.offload,
        "layout": {k: q(v, _LAYOUT_UNITS.get(k, "GPUs")) for k, v in t.layout.items()},
        "parameters_on_gpu": q(t.params_on_gpu, "parameters", "exact"),
        "params": b(t.params, "exact"),
        "grads": b(t.grads, "exact"),
        "optimizer": b(t.optimizer, "exact"),
        "fp8_weight_cache": b(t.fp8_weight_cache, "exact"),
        "state": b(t.state, "exact"),
        "activations": b(t.activations),
        "logits": b(t.logits),
        "transient": b(t.transient),
        "optimizer_step": b(t.optimizer_step),
        "log_prob_pass": b(t.log_prob_pass),
        "log_prob_micro_batch_tokens": q(t.log_prob_tokens, "tokens", "exact"),
        "peak_phase": t.peak_phase,
        "packing_room": None
        if room is None
        else {
            "update_budget": q(room.tokens, "tokens", "estimate"),
            "sequences": q(round(room.sequences, 2), "sequences", "estimate"),
            "kept_free": b(room.kept_free, "exact"),
        },
        "cuda_context": b(t.context),
        "peak": b(t.peak),
        "resident_during_rollout": b(t.resident_during_rollout),
        "notes": list(t.notes),
    }


COST_UNITS = {"fixed": "s", "per_gb": "s/GB", "per_tensor": "s/tensor"}


def _sync_json(plan: MemoryPlan) -> dict:
    s = plan.weight_sync()
    if s.seconds is None or s.fit is None:
        return {"path": s.path, "label": s.label, "seconds": None, "why": s.why}
    return {
        "path": s.path,
        "label": s.label,
        "seconds": q(round(s.seconds, 6), "s", "estimate"),
        "send": {
            "seconds": q(round(s.send_s, 6), "s", "estimate"),
            "bytes": q(round(s.send_gb * 1e9), "bytes", "exact"),
            "tensors": q(s.tensors, "tensors", "exact"),
            "within_measured_sizes": s.fit.covers(s.send_gb, s.tensors),
        },
        "offload_copy": {
            "seconds": q(round(s.copy_s, 6), "s", "estimate"),
            "bytes": q(round(s.copy_gb * 1e9), "bytes", "exact"),
        }
        if s.copy_gb
        else None,
        "fit": {
            "costs": {t: q(round(c, 9), COST_UNITS[t], "estimate") for t, c in s.fit.costs},
            "measured_syncs": q(len(s.fit.points), "syncs"),
            "max_error": q(round(s.fit.max_error, 4), "fraction"),
            "basis": s.fit.basis,
        },
        "source": SYNC_DATA,
        "why": "",
    }


def sync_lines(plan: MemoryPlan) -> list[str]:
    """The plan's weight-sync lines: its time per sync and what it is made of, or why there is none."""
    s = plan.weight_sync()
    if s.seconds is None or s.fit is None:
        return [f"Weight sync ({s.label}): no time predicted: {s.why}"]
    parts = [f"{s.send_s:.3g} s sending {s.send_gb:.2f} GB in {s.tensors:,} tensors"]
    if s.copy_gb:
        parts.append(f"{s.copy_s:.3g} s copying the offloaded {s.copy_gb:.2f} GB of parameters to the GPU")
    size = s.fit.size(s.send_gb, s.tensors)
    outside = "" if s.fit.covers(s.send_gb, s.tensors) else f"; {s.fit.size_text(size)} is outside them"
    return [
        f"Weight sync ({s.label}): {s.seconds:.3g} s per sync after the first (estimate)",
        "  " + " + ".join(parts),
        f"  fit: {s.fit.text()}{outside} ({SYNC_DATA})",
    ]


def plan_json(plan: MemoryPlan) -> dict:
    s = plan.setup
    spec_r = plan.spec_rollout
    cap = capacity_note(plan.bf16_rollout)
    headroom = None if plan.trainer is None else plan.headroom(plan.trainer)
    return {
        "format": 1,
        "spec": plan.spec.name,
        "model": plan.spec.model.name,
        "gpu": {"name": s.gpu, "total_memory": q(s.total_bytes, "bytes", "exact")},
        "engine": {
            "engine": s.engine,
            "version": s.engine_version,
            "runner": spec_r.memory.runner,
            "tp": q(s.tp, "GPUs"),
            "ep": q(s.ep, "GPUs"),
            "gpus_per_replica": q(s.gpus_per_replica, "GPUs"),
            "replicas": q(plan.replicas, "replicas"),
            "gpu_memory_utilization": q(s.utilization, "fraction"),
            "max_num_batched_tokens": q(s.max_num_batched_tokens, "tokens"),
            "max_num_seqs": q(s.max_num_seqs, "sequences"),
            "max_model_len": q(s.max_model_len, "tokens"),
            "cuda_graphs": s.cuda_graphs,
            "defaults": s.defaults,
        },
        "rollout": [_rollout_json(plan, r) for r in plan.rollout],
        "trainer": _trainer_json(plan, plan.trainer),
        "trainer_other_precision": _trainer_json(plan, plan.trainer_other),
        "trainer_fp8_layer_speed": (
            {"measured": False, "why": why} if (why := plan.trainer_gain_unmeasured()) else None
        )
        if (tg := plan.trainer_gain()) is None
        else {
            "measured": True,
            "ratio_vs_bf16": q(tg.ratio, "ratio"),
            "tokens": q(tg.tokens, "tokens"),
            "workload": tg.workload,
            "source": tg.source,
        },
        "weight_sync": _sync_json(plan),
        "trainer_layouts": plan.layouts_text() or None,
        "layout_mismatch": plan.layout_mismatch() or None,
        "host_ram_per_node": None
        if plan.host_ram_per_node is None
        else q(plan.host_ram_per_node, "bytes", "exact"),
        "checkpoint": None
        if plan.trainer is None
        else {
            "per_save": q(plan.trainer.checkpoint_bytes, "bytes", "exact"),
            "bytes_per_parameter": q(plan.trainer.checkpoint_bytes_per_param, "bytes"),
            "contents": CHECKPOINT_CONTENTS,
            "kept": None
            if plan.spec.trainer.keep_checkpoints is None
            else q(plan.spec.trainer.keep_checkpoints, "checkpoints"),
        },
        "verdict": verdict_line(plan),
        "layout_errors": [
            {"code": e.code, "field": e.path, "message": e.message} for e in plan.layout_errors
        ],
        "colocation": None
        if headroom is None
        else {"headroom_beside_rollout": q(headroom, "bytes", "estimate")},
        "verdicts": [
            {
                "code": v.code,
                "ok": v.ok,
                "message": v.message if not v.ok else "",
                "fix": _rules(plan).fix(plan, v) if not v.ok else "",
                "acknowledged": plan.spec.acknowledge.get(v.code),
            }
            for v in plan.verdicts()
        ],
        "estimates": {
            "vllm.non_torch_bytes": estimate_basis("vllm", "non_torch_bytes"),
            "vllm.cudagraph_bytes_per_graph_per_layer": estimate_basis(
                "vllm", "cudagraph_bytes_per_graph_per_layer"
            ),
            "trainer.cuda_context_bytes": estimate_basis("trainer", "cuda_context_bytes"),
            "trainer.resident_beyond_state_bytes": estimate_basis("trainer", "resident_beyond_state_bytes"),
            "vllm.process_beyond_share_bytes": estimate_basis("vllm", "process_beyond_share_bytes"),
        },
        "sources": {
            "expected_gain": gain_source(),
            "expected_gain_running": running_caveat(spec_r.running)
            if any(plan.gain(r) is not None for r in plan.rollout)
            else "",
            "expected_gain_capacity": cap.text()
            if cap and any(plan.gain(r) is not None for r in plan.rollout)
            else "",
            "engine_memory_model": memory_model(s.engine).memory_source,
            "rollout_defaults": f"backends/verl/{plan.spec.stack.verl}.yaml memory.rollout_engine_defaults",
            "trainer_memory_model": f"backends/verl/{plan.spec.stack.verl}.yaml memory.fsdp_state, "
            "memory.megatron_state, memory.colocation",
            "gpu_memory": "fp8spec/data/gpu_memory.yaml",
            "notes": plan.notes,
        },
    }


CHECKPOINT_CONTENTS = (
    "the actor's model and optimizer state (verl's checkpoint.save_contents model, optimizer, extra; "
    "backends/verl profile memory.checkpoint_contents): parameters as the trainer stores them plus AdamW's state"
)


def verdict_line(plan: MemoryPlan) -> str:
    """The one verdict of the plan: 'fits', or 'does not fit: ...' naming every failing check whose rule is an
    error; warnings (preemption, an estimated peak) are named after 'fits' without changing it."""
    rules = _rules(plan)
    if plan.layout_errors:
        codes = dict.fromkeys(e.code for e in plan.layout_errors)
        return "invalid layout: " + "; ".join(f"{code} {rules.name(code)}" for code in codes)
    failing = [v for v in plan.verdicts() if not v.ok]
    errors = [v for v in failing if rules.is_error(v.code)]
    if errors:
        return "does not fit: " + "; ".join(f"{v.code} {rules.name(v.code)}" for v in errors)
    if failing:
        warned = ", ".join(
            f"{v.code} {rules.name(v.code)}" + (" (acknowledged)" if v.code in plan.spec.acknowledge else "")
            for v in failing
        )
        return f"fits (warning: {warned})"
    return "fits"


def _rules(plan: MemoryPlan) -> PlanRules:
    if plan.rules is None:
        raise ValueError("a plan is printed once the rules judged it (fp8spec.rules.plan_columns.judged)")
    return plan.rules


def render_json(plan: MemoryPlan) -> str:
    return json.dumps(plan_json(plan), indent=2, sort_keys=True)


def _g(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _step_word(r) -> str:
    if r.kv_shortfall == "no_kv_memory":
        return "no KV room"
    if r.kv_shortfall == "below_one_request":
        return "< 1 request"
    return "fits" if r.fits_without_preemption else "preempts"


def fix_lines(plan: MemoryPlan) -> list[tuple[str, str]]:
    """(code, fix) of each failed verdict, as `plan` prints them (values checked against every rule)."""
    return [(v.code, _rules(plan).fix(plan, v)) for v in plan.failing()]


def render_text(plan: MemoryPlan) -> str:
    s, rs = plan.setup, plan.rollout
    spec_r = plan.spec_rollout
    out = [
        f"fp8spec plan: {plan.spec.name} ({plan.spec.model.name}, {plan.world} x {s.gpu}, "
        f"{s.total_bytes / GIB:.2f} GiB per GPU)",
        "",
    ]
    engine = get_engine(s.engine)
    out.append(
        f"Rollout engine: {s.engine} {s.engine_version} ({engine.runner_labels[spec_r.memory.runner]}), "
        f"TP {s.tp} x EP {s.ep} = {s.gpus_per_replica} GPU(s) per replica, {plan.replicas} replica(s)"
    )
    out.append(
        f"  gpu_memory_utilization {s.utilization:g}, max_num_batched_tokens {s.max_num_batched_tokens}, "
        f"max_num_seqs {s.max_num_seqs}, max_model_len {s.max_model_len}, CUDA graphs "
        f"{'on' if s.cuda_graphs else 'off'} ({s.defaults})"
    )
    labels = [r.choice.label + (" *" if r.is_spec else "") for r in rs]
    width = max(18, *(len(x) + 2 for x in labels))

    def row(name: str, cells: list[str]) -> str:
        return f"  {name:<34}" + "".join(f"{c:>{width}}" for c in cells)

    out.append(row("per GPU", labels))
    out.append(row("weights", [_g(r.weights.total) for r in rs]))
    out.append(
        row(
            "  FP8 linears + block scales",
            [_g(r.weights.fp8_linear + r.weights.fp8_scales) if r.weights.fp8_linear else "-" for r in rs],
        )
    )
    for label, term in engine.memory_rows:
        out.append(row(label, [_g(getattr(r.memory, term)) for r in rs]))
    out.append(row("available KV memory", [_g(r.memory.available_kv) for r in rs]))
    out.append(row("KV bytes per token (all layers)", [f"{r.kv.bytes_per_token:,} B" for r in rs]))
    out.append(row("KV capacity", [f"{r.kv.tokens:,} tok" for r in rs]))
    out.append(row(f"max concurrency @ {s.max_model_len} tok", [f"{r.kv.max_concurrency:.2f}x" for r in rs]))
    out.append(row(f"sequences @ {spec_r.seq_len} tok", [f"{r.concurrency:.1f}" for r in rs]))
    out.append(
        row(
            f"step: {spec_r.running} running of {spec_r.sequences_per_replica}/replica",
            [_step_word(r) for r in rs],
        )
    )
    out.append(row("expected rollout speed-up", [plan.gain_text(r) for r in rs]))
    out.append("  * the spec's choice")
    runner_note = engine.runner_notes.get(spec_r.memory.runner)
    if runner_note and s.cuda_graphs:
        out.append(f"  note: {runner_note}")
    if any(plan.gain(r) is not None for r in rs):
        out.append("  speed-up source: " + gain_source())
        if caveat := running_caveat(spec_r.running):
            out.append(f"  note: {caveat}")
        if cap := capacity_note(plan.bf16_rollout):
            out.append(f"  note: {cap.text()}")
    else:
        out.append(
            f"  speed-up: no measurement covers {s.engine} with {plan.model.architecture} "
            "(fp8spec/data/expected_gains.yaml)"
        )
    t = plan.trainer
    if t is not None:
        out.append("")
        layout = ", ".join(f"{k} {v}" for k, v in t.layout.items())
        out.append(
            f"Trainer: {t.backend} ({layout}), busiest GPU holds {t.params_on_gpu / 1e9:.2f}B parameters"
        )
        cols = [t] + ([plan.trainer_other] if plan.trainer_other is not None else [])
        cols.sort(key=lambda x: x.precision)  # bf16 before fp8
        out.append(row("per GPU", [c.precision.upper() + (" *" if c is t else "") for c in cols]))
        items = [
            ("parameters", "params"),
            ("gradients", "grads"),
            ("optimizer state", "optimizer"),
            ("FP8 weight caches", "fp8_weight_cache"),
            ("state (training pass)", "state"),
            ("activations (estimate)", "activations"),
            ("logits (estimate)", "logits"),
            ("FSDP gather buffers (estimate)", "transient"),
            ("optimizer step temporaries", "optimizer_step"),
            ("training peak incl. CUDA context", "peak"),
            ("kept during rollout", "resident_during_rollout"),
        ]
        if any(c.peak_phase == "old log-prob" for c in cols):  # shown where it sets the peak
            at = ("old log-prob pass (estimate)", "log_prob_pass")
            items.insert(items.index(("training peak incl. CUDA context", "peak")), at)
        for name, attr in items:
            values = [getattr(c, attr) for c in cols]
            if any(values) or attr in ("params", "state", "peak"):
                out.append(row(name, [_g(v) for v in values]))
        rooms = [packing_room(plan, c) for c in cols]
        if all(r is not None for r in rooms):
            cells = [f"{r.tokens:,} tok" if r and r.tokens else "none" for r in rooms]
            out.append(row("packed update budget that fits", cells))
        engine_share = spec_r.memory.requested + engine_beyond_share(plan.setup.engine)
        out.append(row("engine request + beyond (measured)", [_g(engine_share) for _ in cols]))
        out.append(row("headroom beside the rollout engine", [_g(plan.headroom(c)) for c in cols]))
        if plan.setup.sync_bucket_bytes:
            from fp8spec.plan.feasibility import at_sync

            mib = plan.setup.sync_bucket_bytes >> 20
            out.append(row(f"at weight sync, {mib} MiB bucket", [_g(at_sync(plan, c)[2]) for c in cols]))
        tg = plan.trainer_gain()
        if tg is not None:
            speed = [
                "1.00x" if c.precision == "bf16" else f"{tg.ratio:.2f}x @ {tg.tokens // 1024}K tok"
                for c in cols
            ]
            out.append(row("layer fwd+bwd speed vs BF16 (measured)", speed))
            word = "slower" if tg.ratio < 1 else "faster"
            out.append(
                f"  FP8 training {word} than BF16 for this model class: {tg.workload}; source: {tg.source}"
            )
        elif why := plan.trainer_gain_unmeasured():
            speed = ["1.00x" if c.precision == "bf16" else "not measured" for c in cols]
            out.append(row("layer fwd+bwd speed vs BF16", speed))
            out.append(f"  FP8 training speed not measured for this model class: {why}")
        if layouts := plan.layouts_text():
            out.append(f"  {layouts}")
        if mismatch := plan.layout_mismatch():
            out.append(f"  {mismatch}")
        for note in t.notes:
            out.append(f"  note: {note}")
        if (room := packing_room(plan)) is not None:
            out.append(f"  note: {packing_note(room)}")
        if plan.host_ram_per_node is not None:
            what = " + ".join(k for k in ("params", "optimizer") if t.offload.get(k))
            out.append(
                f"  host RAM per node for offloaded state ({what}): {_g(plan.host_ram_per_node)} "
                f"({_g(t.host_offload)} x {plan.gpus_per_node} GPUs)"
            )
        kept = plan.spec.trainer.keep_checkpoints
        out.append(
            f"  checkpoint per save: {_g(t.checkpoint_bytes)} ({t.model_params / 1e9:.2f}B parameters x "
            f"{t.checkpoint_bytes_per_param} bytes: model + optimizer state)"
            + (f", {_g(t.checkpoint_bytes * kept)} with the newest {kept} kept" if kept else "")
        )
    out += ["", *sync_lines(plan)]
    problems = plan.failing()
    out.append("")
    for v in problems:
        reason = plan.spec.acknowledge.get(v.code)
        out.append(f"{v.code}: {v.message}" + (f" (acknowledged: {reason})" if reason else ""))
        fix = _rules(plan).fix(plan, v)
        if fix:
            out.append(f"    fix: {fix}")
    for note in plan.notes:
        out.append(f"note: {note}")
    for e in plan.layout_errors:
        out.append(f"{e.code}: {e.message} ({e.path}, as the plan was asked about it)")
    out.append(f"verdict: {verdict_line(plan)}")
    return "\n".join(out) + "\n"
