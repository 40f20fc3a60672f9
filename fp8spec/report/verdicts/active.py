"""Is FP8 on where the bundle says: every patch logged as active, the compiled weight-sync path the one that
ran, q/k/v scales applied after every sync and wake-up, TE FP8 on the trainer's modules, no version refused."""

from __future__ import annotations

import re
from typing import Iterable, Iterator

from fp8spec.report.names import names
from fp8spec.report.steps import per_sync_seconds
from fp8spec.report.verdicts.unit import Context, verdict

Found = Iterable[tuple[str, str]]
# The dtypes of a module kept out of FP8 (embedding, norms, output layer, router): BF16, or FP32 for a router
# the spec keeps in FP32.
_KEPT = (":bfloat16", ":float32")


@verdict(
    "RPT001",
    "patch-not-active",
    "error",
    "A runtime patch the bundle lists never logged that it ran.",
    """Each patch of fp8spec's runtime writes a line when it does its work (fp8spec/data/report_lines.yaml names
    them). A patch the bundle activates that never logs did not load: the worker did not import
    fp8spec.runtime (the runtime env was not passed), the version guard refused, or the hook never fired, and
    the run is not the one compiled: e.g. the engine quantizes with verl's own quantizer, or KV scales stay 1.0.
    Patches that log only when they have something to do (mbridge_compat, te_extra_state_compat, ue8m0_scales)
    are not judged.""",
    "submit the bundle with its runtime env (bash submit.sh, or ray job submit --runtime-env runtime_env.yaml); "
    "run the bundle's preflight; look for the version guard's message in the workers' logs",
    needs="bundle",
    example=(
        "the real 4B run with its direct_sync lines removed, against its bundle",
        "patch 'direct_sync' is listed by the bundle but no line of it is in the run",
        "the real 4B run against its bundle",
    ),
)
def patch_not_active(ctx: Context) -> Found:
    assert ctx.bundle is not None
    n = names()
    proven = {p.proves for p in n.lines if p.proves and ctx.run.of(p.name)}
    read = f"{len(ctx.run.sources)} log file(s) read"
    for patch in ctx.bundle.patches:
        if patch not in proven and patch not in n.silent_when_idle:
            yield (
                ctx.bundle.where,
                f"patch {patch!r} is listed by the bundle but no line of it is in the run ({read})",
            )


@verdict(
    "RPT002",
    "sync-path-mismatch",
    "error",
    "The weight sync ran another path than the bundle compiled.",
    """The bundle chose one weight-sync path (the direct path into the engine's parameters, fp8spec's block
    quantizer, or verl's own); its sync time and its FP8 weights' exactness were planned for that path. Each path
    logs one line per sync; another path's lines, or none while verl timed a sync, mean the compiled path did not
    run (a patch not loaded, or a fallback).""",
    "check RPT001 first; then the engine worker's log for the direct path's refusal (it names why it fell back)",
    needs="bundle",
    example=(
        "the real tiny FSDP + vLLM run (fast_block_quant) against a bundle that compiled direct_sync",
        "the bundle compiled direct_sync, but fast_block_quant ran",
        "the real 4B run against its bundle",
    ),
)
def sync_path_mismatch(ctx: Context) -> Found:
    assert ctx.bundle is not None
    n = names()
    ran: dict[str, str] = {}
    for p in n.lines:
        found = ctx.run.of(p.name)
        if p.sync_path and found:
            ran.setdefault(p.sync_path, str(found[0].loc))
    want = ctx.bundle.sync_path
    synced = any(r.sync_s is not None for r in ctx.rows)
    if want == "verl":
        for path, where in sorted(ran.items()):
            yield where, f"the bundle compiled verl's own weight sync, but {path} ran"
        return
    if want in ran:
        return
    if ran:
        path, where = sorted(ran.items())[0]
        yield where, f"the bundle compiled {want}, but {path} ran"
    elif synced:
        first = next(r for r in ctx.rows if r.sync_s is not None)
        yield (
            first.where,
            f"the bundle compiled {want}, but verl timed weight syncs and no {want} line is in the run",
        )


@verdict(
    "RPT003",
    "kv-scales-stale",
    "error",
    "FP8 KV scales were not applied after every weight sync, or not re-applied after a KV-cache wake-up.",
    """With per-step calibration the trainer measures q/k/v ranges each step and the engine applies them after
    each weight sync; vLLM's sleep mode rebuilds the KV cache on wake-up, which resets the scales, so they are
    re-applied then. A sync without its scales leaves the engine on last step's (or the default 1.0) scales:
    FP8 KV values clip or lose precision as the policy moves, and the mismatch grows.""",
    "check that the kv_scales patch is active in the engine workers (RPT001) and that no worker restarted; "
    "a run with static scales should not list kv_scales",
    example=(
        "the real 4B run with its kv_scales lines after step 2 removed",
        "q/k/v scales applied 2 time(s) for 3 calibrated step(s)",
        "the real 4B run",
    ),
)
def kv_scales_stale(ctx: Context) -> Found:
    run = ctx.run
    listed = ctx.bundle is not None and "kv_scales" in ctx.bundle.patches
    if not listed and not run.of("kv_calibrating") and not run.of("kv_applied"):
        return
    applied = run.of("kv_applied")
    syncs = len(per_sync_seconds(run)) or len(ctx.rows) + 1
    expected = min(len(ctx.rows), syncs - 1)  # the first sync fills the engine before any calibration
    if len(applied) < expected:
        where = str(applied[-1].loc) if applied else (ctx.rows[0].where if ctx.rows else run.sources[0])
        after = f"; none after {applied[-1].loc}" if applied else ""
        yield where, f"q/k/v scales applied {len(applied)} time(s) for {expected} calibrated step(s){after}"
    reapplied = run.of("kv_reapplied")
    if reapplied and len(reapplied) < len(applied):
        yield (
            str(reapplied[-1].loc),
            (
                f"scales re-applied after {len(reapplied)} of {len(applied)} KV-cache wake-ups; the others ran on "
                "reset scales"
            ),
        )


@verdict(
    "RPT004",
    "te-not-fp8",
    "error",
    "The trainer's TransformerEngine modules did not run in the precision the layout planned, or an excluded module "
    "has FP8 weights.",
    """With FP8 training (Megatron + TransformerEngine) the te_report patch counts, for each old-log-prob and
    update pass, the TE module calls that ran under FP8 and the modules kept in BF16 (embedding, norms, output
    layer, router: the spec's exclusions) with their weights' dtype. A TE linear outside FP8 means the recipe did
    not reach it (an FP8 autocast missing around a pass, or a module type the recipe skips); an excluded module
    with FP8 weights (an FP8 router) is the instability the paper's router ablation shows. Either way the
    trainer is not the one planned, and its precision differs from the rollout's. With a per-module layout
    (training.bf16_modules, linear.bf16_first_layers) the line counts each module class and names the classes
    planned in BF16: a class planned BF16 that ran FP8 (the layout did not take effect, e.g. the module_precision
    patch did not load or the TE op fuser bypassed it) is as wrong as an FP8 class that did not.""",
    "compare the modules named with the spec's training.fp8 exclusions; check Megatron's fp8 settings in the "
    "bundle's composed.yaml",
    example=(
        "the real Megatron + TE run with 4 of a pass's TE module calls outside FP8",
        "old_log_prob: 4 of 1180 TE module calls ran outside FP8",
        "the real Megatron + TE run",
    ),
)
def te_not_fp8(ctx: Context) -> Found:
    for e in ctx.run.of("te_no_modules"):
        yield (
            str(e.loc),
            "te_report found no TransformerEngine module in the actor: FP8 training cannot be on",
        )
    for e in ctx.run.of("te_phase"):
        fp8, total = int(e.groups["fp8"]), int(e.groups["total"])
        by_class = _class_counts(e.groups.get("classes"))
        if by_class:
            yield from (
                (str(e.loc), m) for m in _layout_misses(e.groups["phase"], by_class, e.groups.get("planned"))
            )
        elif fp8 < total:
            outside = (e.groups.get("outside") or "").strip()
            yield (
                str(e.loc),
                (
                    f"{e.groups['phase']}: {total - fp8} of {total} TE module calls ran outside FP8"
                    + (f" ({outside})" if outside else "")
                ),
            )
        kept = (e.groups.get("weights") or "").split(", ")
        quantized = [kw for kw in kept if kw and not kw.endswith(_KEPT)]
        if quantized:
            yield (
                str(e.loc),
                f"{e.groups['phase']}: modules meant to stay out of FP8 have FP8 weights: {', '.join(quantized)}",
            )


def _class_counts(text: str | None) -> dict[str, tuple[int, int]]:
    """'attention 8/8, experts 0/8' -> {class: (FP8 calls, calls)}; {} for a line without per-class counts."""
    counts = {}
    for part in (text or "").split(","):
        m = re.fullmatch(r"\s*(\w+) (\d+)/(\d+)\s*", part)
        if m:
            counts[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return counts


def _layout_misses(phase: str, by_class: dict[str, tuple[int, int]], planned: str | None) -> Iterator[str]:
    """Each class whose calls ran otherwise than the layout planned: FP8 in a class planned BF16, outside FP8 in
    any other."""
    bf16 = {c.strip() for c in (planned or "").split(",") if c.strip() and c.strip() != "none"}
    for cls, (fp8, calls) in sorted(by_class.items()):
        if cls in bf16 and fp8:
            yield f"{phase}: {fp8} of {calls} {cls} TE module calls ran FP8; the layout keeps {cls} in BF16"
        elif cls not in bf16 and fp8 < calls:
            yield f"{phase}: {calls - fp8} of {calls} {cls} TE module calls ran outside FP8"


@verdict(
    "RPT005",
    "version-refused",
    "error",
    "The runtime patch set refused a backend version, so its patches did not run.",
    """Each patch checks the installed verl / vLLM / SGLang release against the ones its code was written for
    (fp8spec/runtime/version_guard.py) and refuses any other: patching an unknown release could corrupt weights
    silently. The run then fails, or runs without the patch.""",
    "install the release the bundle's preflight.json names (the image's packages), or compile for the installed "
    "release if fp8spec profiles it",
    example=(
        "the real 4B run with the version guard's refusal added",
        "vllm 0.25.0 is installed; the patch set supports 0.24.0, 0.33.0",
        "the real 4B run",
    ),
)
def version_refused(ctx: Context) -> Found:
    for e in ctx.run.of("version_refused"):
        g = e.groups
        yield str(e.loc), f"{g['dist']} {g['version']} is installed; the patch set supports {g['known']}"


@verdict(
    "RPT006",
    "runtime-env-differs",
    "error",
    "The run's runtime env activated other patches than the bundle lists.",
    """verl prints its Ray runtime env at start, with the FP8SPEC_RUNTIME_PATCHES every worker sees. When that
    list differs from the bundle's (its preflight.json), the job was not submitted with this bundle's
    runtime_env.yaml (an older bundle, a hand-edited command, another spec's bundle), so the report's other
    checks compare the run with the wrong promise.""",
    "submit the bundle with its own runtime env (bash submit.sh), or give --bundle the bundle the job was "
    "launched from",
    needs="bundle",
    example=(
        "the real tiny FSDP + vLLM run against a newer bundle",
        "the run's runtime env set FP8SPEC_RUNTIME_PATCHES=fast_block_quant,kv_scales; the bundle lists direct_sync,kv_scales",
        "the real 4B run against its bundle",
    ),
)
def runtime_env_differs(ctx: Context) -> Found:
    assert ctx.bundle is not None
    if ctx.run.patches_logged is None:
        return
    text, where = ctx.run.patches_logged
    ran = tuple(sorted(p for p in text.split(",") if p))
    if ran != ctx.bundle.patches:
        yield (
            str(where),
            (
                f"the run's runtime env set FP8SPEC_RUNTIME_PATCHES={text or '(empty)'}; the bundle lists "
                f"{','.join(ctx.bundle.patches) or '(none)'} ({ctx.bundle.where})"
            ),
        )
