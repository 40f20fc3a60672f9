"""The direct weight-sync path's plan: where every checkpoint tensor the trainer sends lands in the engine.

Built once per engine from the engine's own tables (no torch needed here; shapes and names only):

* ``stacked``: vLLM's ``stacked_params_mapping`` tuples ``(param_name, weight_name, shard_id)`` as its model's
  ``load_weights`` uses them (vLLM 0.24.0 ``models/qwen2.py`` lines 429-435 for Qwen3, ``models/qwen3_moe.py``
  lines 532-538 for Qwen3-MoE); in the engine they come from the model class's ``packed_modules_mapping``.
* ``experts``: vLLM's ``expert_params_mapping`` tuples ``(param_name, weight_name, expert_id, shard_id)``
  (``RoutedExperts.make_expert_params_mapping``, ``layers/fused_moe/routed_experts.py`` lines 916-977); in the
  engine ``model.model.get_expert_mapping()``.
* ``params``: the engine's named parameters -> (shape, dtype name), after verl's staging.
* ``loaders``: the engine's unquantized parameters -> the qualified name of their ``weight_loader`` (None: vLLM's
  ``default_weight_loader``); those whose loader is a plain copy of an equal-shaped tensor are planned as copies.

The plan answers, per checkpoint name: the destination weight and block-scale parameters, the expert index,
and the rows / columns of the quantized full tensor that land at which offset, exactly as vLLM 0.24.0's loaders
narrow them: ``QKVParallelLinear.weight_loader_v2`` + ``_ColumnvLLMParameter.load_qkv_weight``
(``layers/linear.py`` 1078-1123, ``parameter.py`` 178-201), ``MergedColumnParallelLinear.weight_loader_v2`` +
``load_merged_column_weight`` (linear.py 847-912, parameter.py 156-176), ``RowvLLMParameter``
``load_row_parallel_weight`` (parameter.py 220-230), ``RoutedExperts._load_w13`` / ``_load_w2``
(routed_experts.py 442-536), block scales through ``adjust_block_scale_shard`` (linear.py 81-91). verl
quantizes the *full* tensor and the loaders narrow the FP8 tensor and its scales, so the plan does the same;
it only covers placements whose every offset is block-aligned (then the narrowed quantized blocks are the
blocks of the narrowed slice). Unquantized tensors (norms, embeddings, lm_head, the MoE router) are planned as
plain copies where vLLM's loader is one (``COPY_LOADERS``); anything else is left out of the plan and goes to
verl's receiver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

FP8 = "float8_e4m3fn"
# Fp8LinearMethod / Fp8MoEMethod block scales (weight_scale_inv, w13_weight_scale_inv)
SCALE_SUFFIX = "_scale_inv"
COPY_DTYPES = ("bfloat16", "float16", "float32")
# vLLM 0.24.0 weight loaders that, for a tensor of the parameter's own shape, are ``param.data.copy_(loaded)``
# and nothing else (verl hands unquantized tensors to them as received: vllm_quant_utils.py 372-374):
# default_weight_loader (model_loader/weight_utils.py 1198-1216; parameters without a loader, e.g. RMSNorm's,
# layernorm.py 62-65), ReplicatedLinear.weight_loader (layers/linear.py 362-370; the Qwen3-MoE router,
# qwen3_moe.py 179-185) and VocabParallelEmbedding.weight_loader (vocab_parallel_embedding.py 430-470;
# embeddings and ParallelLMHead), the last only at TP 1, where its shard is the whole vocabulary at row 0 and
# the zero-fill past it is empty when the shapes are equal. value: whether the loader is TP-sharded.
COPY_LOADERS = {
    None: False,
    "default_weight_loader": False,
    "ReplicatedLinear.weight_loader": False,
    "VocabParallelEmbedding.weight_loader": True,
}


@dataclass(frozen=True)
class Region:
    """A 2-D block of one matrix: rows [r0, r0+rows) x cols [c0, c0+cols)."""

    r0: int
    rows: int
    c0: int
    cols: int


@dataclass(frozen=True)
class Placement:
    """Where one checkpoint tensor lands: source region of its full quantized matrix -> destination region."""

    name: str
    param: str  # destination weight parameter (FP8)
    scale: str  # its block-scale parameter
    expert: int | None  # leading index into a stacked expert tensor, or None
    src: Region  # in the checkpoint tensor (element rows / cols)
    dst: Region  # in the destination matrix (the expert's matrix for stacked tensors)
    src_s: Region  # the same in block-scale units
    dst_s: Region


@dataclass(frozen=True)
class Copy:
    """An unquantized checkpoint tensor copied whole into an engine parameter of the same shape."""

    name: str
    param: str


@dataclass
class DirectPlan:
    placements: dict[str, Placement] = field(default_factory=dict)
    copies: dict[str, Copy] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)  # checkpoint name -> why verl's receiver takes it

    def covers(self, name: str) -> bool:
        return name in self.placements or name in self.copies


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def resolve(
    name: str, stacked: Sequence[tuple], experts: Sequence[tuple], moe: bool
) -> tuple[str, str, object, int | None]:
    """vLLM 0.24.0's name mapping in ``load_weights`` (qwen2.py 442-477, qwen3_moe.py 559-657), first match wins.

    Returns ``(kind, param_name, shard_id, expert_id)``; kind is 'stacked', 'expert' or 'plain'."""
    for param_name, weight_name, shard_id in stacked:
        if weight_name not in name:
            continue
        if moe and "mlp.experts" in name:  # qwen3_moe.py 568-569: experts are handled by the expert mapping
            continue
        return "stacked", name.replace(weight_name, param_name), shard_id, None
    if moe:
        for param_name, weight_name, expert_id, shard_id in experts:
            if weight_name in name:
                return "expert", name.replace(weight_name, param_name), shard_id, expert_id
    return "plain", name, None, None


def _scale_region(src: Region, dst: Region, full: tuple[int, int], block: tuple[int, int]):
    """Block-scale regions of an element placement; None when any cut is not on a block edge.

    A cut at the matrix's own ragged end is fine (the last block is partial in the source and the engine alike)."""
    bm, bn = block
    m, n = full
    for start, size, total, b in ((src.r0, src.rows, m, bm), (src.c0, src.cols, n, bn)):
        if start % b or (size % b and start + size != total):
            return None
    if dst.r0 % bm or dst.c0 % bn:
        return None
    s = Region(src.r0 // bm, _cdiv(src.rows, bm), src.c0 // bn, _cdiv(src.cols, bn))
    d = Region(dst.r0 // bm, _cdiv(dst.rows, bm), dst.c0 // bn, _cdiv(dst.cols, bn))
    return s, d


class Planner:
    """Places checkpoint tensors one name at a time (memoized), so a plan grows with the first sync's stream.

    ``part_rows``: fused parameter name -> full (un-sharded) row count of each part in shard order, from the engine's
    own layers (``QKVParallelLinear.output_sizes`` / ``MergedColumnParallelLinear.output_sizes``, linear.py 963-967
    and 595-610); a part may sit in another bucket than its siblings.
    ``expert_to_local``: global expert id -> local id or -1 (``_map_global_expert_id_to_local_expert_id``,
    routed_experts.py 270-272); default: identity when the stacked tensor holds every expert."""

    def __init__(
        self,
        params,
        part_rows,
        stacked,
        experts=(),
        tp_rank=0,
        tp_size=1,
        block=(128, 128),
        expert_to_local=None,
        loaders=None,
    ):
        self.params, self.part_rows = params, part_rows
        self.loaders = loaders or {}  # unquantized parameter -> its weight_loader's qualified name
        self.stacked, self.experts = list(stacked), list(experts)
        self.tp_rank, self.tp_size, self.block = tp_rank, tp_size, (int(block[0]), int(block[1]))
        self.to_local = expert_to_local
        self.plan = DirectPlan()

    def place(self, name: str, shape: Sequence[int]) -> Placement | Copy | None:
        p = self.plan
        got = p.placements.get(name) or p.copies.get(name)
        if got is not None:
            return got
        if name in p.left_out:
            return None
        why = _place(p, name, tuple(int(d) for d in shape), self)
        if why:
            p.left_out[name] = why
            return None
        return p.placements.get(name) or p.copies[name]


def _copy(name: str, kind: str, pname: str, shape: tuple[int, ...], pl: Planner) -> str | None:
    """Why ``name`` is not a plain copy into the unquantized ``pname`` (None: it is)."""
    pshape, pdtype = pl.params[pname]
    if (
        kind != "plain" or "scale" in name or "zero_point" in name
    ):  # kv scales: vLLM remaps and post-processes
        return f"{pname} is {pdtype}, loaded by vLLM's {kind} path"
    if pdtype not in COPY_DTYPES or len(shape) not in (1, 2) or tuple(pshape) != shape:
        return f"{pname} {pdtype} {tuple(pshape)} is not a copy of {shape}"
    if pname not in pl.loaders:
        return f"{pname}: its weight loader is unknown"
    loader = pl.loaders[pname]
    if loader not in COPY_LOADERS:
        return f"{pname}: weight loader {loader} is not a plain copy"
    if COPY_LOADERS[loader] and pl.tp_size != 1:
        return f"{pname}: {loader} shards the vocabulary at tp {pl.tp_size}"
    return None


def _place(plan: DirectPlan, name: str, shape: tuple[int, ...], pl: Planner) -> str | None:
    kind, pname, shard_id, expert_id = resolve(name, pl.stacked, pl.experts, bool(pl.experts))
    if pname not in pl.params:
        return f"no engine parameter {pname}"
    pshape, pdtype = pl.params[pname]
    if pdtype != FP8:
        why = _copy(name, kind, pname, shape, pl)
        if why is None:
            plan.copies[name] = Copy(name, pname)
        return why
    if len(shape) != 2:
        return "not a matrix"
    sname = pname + SCALE_SUFFIX
    if sname not in pl.params:
        return f"no block-scale parameter {sname}"
    m, n = shape
    tp, rank = pl.tp_size, pl.tp_rank
    expert = None
    if kind == "expert":
        assert expert_id is not None
        local = pl.to_local(expert_id) if pl.to_local else (expert_id if expert_id < pshape[0] else -1)
        if local < 0:
            return "expert not on this rank"
        expert = local
        rows_d, cols_d = pshape[1], pshape[2]
        if shard_id == "w2":  # _load_w2 (routed_experts.py 493-536): shard dim 1, rows whole
            src, dst = Region(0, m, cols_d * rank, cols_d), Region(0, m, 0, cols_d)
            if cols_d * tp != n or rows_d != m:
                return f"w2 {tuple(pshape)} does not match {shape} at tp {tp}"
        else:  # _load_w13 (442-491): w1 / w3 -> first / second half of w13 (is_act_and_mul), shard dim 0
            half = rows_d // 2
            src, dst = Region(half * rank, half, 0, n), Region(0 if shard_id == "w1" else half, half, 0, n)
            if half * tp != m or cols_d != n:
                return f"w13 {tuple(pshape)} does not match {shape} at tp {tp}"
    elif kind == "stacked":
        rows_d, cols_d = pshape
        fused = pname.rsplit(".", 1)[0]
        full = pl.part_rows.get(fused)
        order = [s for p_, _, s in pl.stacked if fused.endswith("." + p_)]
        if full is None or len(full) != len(order) or shard_id not in order:
            return f"no part sizes for {fused}"
        if any(r % tp for r in full) or cols_d != n:
            return f"{fused}: parts not divisible by tp {tp}"
        local = [r // tp for r in full]
        if sum(local) != rows_d:
            return f"{fused}: engine rows {rows_d} != tp-local parts {local} (kv-head replication is not planned)"
        i = order.index(shard_id)
        if full[i] != m:
            return f"{name}: {m} rows, the engine expects {full[i]}"
        src, dst = Region(rank * local[i], local[i], 0, n), Region(sum(local[:i]), local[i], 0, n)
    else:
        rows_d, cols_d = pshape
        # RowvLLMParameter.load_row_parallel_weight (parameter.py 220-230)
        if rows_d == m and cols_d * tp == n:
            src, dst = Region(0, m, rank * cols_d, cols_d), Region(0, m, 0, cols_d)
        elif rows_d * tp == m and cols_d == n:  # load_column_parallel_weight (parameter.py 148-154)
            src, dst = Region(rank * rows_d, rows_d, 0, n), Region(0, rows_d, 0, n)
        else:
            return f"{pname} {tuple(pshape)} does not match {shape} at tp {tp}"
    sc = _scale_region(src, dst, (m, n), pl.block)
    if sc is None:
        return f"{name}: a tp or fusion cut is off the {pl.block[0]}x{pl.block[1]} block grid"
    plan.placements[name] = Placement(name, pname, sname, expert, src, dst, sc[0], sc[1])
    return None
