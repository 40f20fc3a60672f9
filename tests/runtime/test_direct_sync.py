"""The direct weight-sync path on CPU: the plan against vLLM 0.24.0's own mapping tables (read from the wheel) and
real model shapes, and quantize-into-destination byte-equal to quantize-then-copy the way vLLM's loaders copy.

The destination parameters are a stand-in (names and shapes as vLLM's block-FP8 methods create them); the real
engine's parameters are exercised by the GPU tests at the end and by the probe on the device (benchmarks/engine)."""

from __future__ import annotations

import pytest
import torch

from fp8spec.runtime.quantization.blockquant import quantize_blockwise
from fp8spec.runtime.weight_sync.receiver.direct_sync import DirectSync
from fp8spec.runtime.weight_sync.receiver.direct_sync_plan import COPY_LOADERS, Planner, resolve

from ._plan import build_plan
from ._qwen_shapes import EMBEDDING_LOADER, catalog_config, checkpoint, engine_loaders, engine_params
from ._vllm_tables import (
    LAYERNORM,
    QWEN3_MOE,
    VOCAB,
    class_init_source,
    class_methods,
    expert_params_mapping,
    loader_source,
    packed_modules_mapping,
    sources,
    stacked_params_mapping,
)

pytestmark = pytest.mark.slow  # the vLLM wheel comes from the snapshot cache (downloaded once)

SMALL_DENSE = {
    "hidden_size": 256,
    "head_dim": 64,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 512,
    "num_hidden_layers": 2,
    "intermediate_size": 512,
}
SMALL_MOE = dict(
    SMALL_DENSE, num_experts=4, moe_intermediate_size=512
)  # N differs from hidden, as in 30B-A3B


def _tables(cfg):
    model = "qwen3_moe" if cfg.get("num_experts") else "qwen3"
    experts = expert_params_mapping(cfg["num_experts"]) if cfg.get("num_experts") else []
    return stacked_params_mapping(model), experts


@pytest.mark.parametrize(
    "case,tp,count",
    [("qwen3-8b", 1, 252), ("qwen3-8b", 2, 252), ("qwen3-30b-a3b", 1, 18624), ("qwen3-30b-a3b", 2, 18624)],
)
def test_plan_covers_every_quantized_tensor_of_the_real_models(case, tp, count):
    cfg = catalog_config(case)
    params, parts = engine_params(cfg, tp)
    stacked, experts = _tables(cfg)
    plan = build_plan(checkpoint(cfg), params, parts, stacked, experts, tp_rank=tp - 1, tp_size=tp)
    assert len(plan.placements) == count
    assert all(n.endswith("_proj.weight") for n in plan.placements)
    # what is left for verl's receiver: embeddings, lm_head, norms, router (BF16 in the engine)
    assert not any(n.endswith("_proj.weight") for n in plan.left_out)
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(plan.left_out)


@pytest.mark.parametrize("case", ["qwen3-8b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("tp", [1, 2])
def test_the_unquantized_tensors_are_planned_as_copies_where_the_loader_is_one(case, tp):
    cfg = catalog_config(case)
    params, parts = engine_params(cfg, tp)
    stacked, experts = _tables(cfg)
    ckpt = checkpoint(cfg)
    plan = build_plan(ckpt, params, parts, stacked, experts, tp - 1, tp, loaders=engine_loaders(params))
    plain = [n for n in ckpt if not n.endswith("_proj.weight")]
    vocab = {"model.embed_tokens.weight", "lm_head.weight"}
    # norms and the router at any tp; the embedding and lm_head only at tp 1 (their loader shards the vocabulary)
    assert set(plan.copies) == (set(plain) if tp == 1 else set(plain) - vocab)
    assert all(c.param == n for n, c in plan.copies.items())
    assert set(plan.left_out) == (set() if tp == 1 else vocab)
    assert len(plan.placements) == len(ckpt) - len(plain)
    # without the loaders (an engine whose parameters could not be read) nothing is copied
    bare = build_plan(ckpt, params, parts, stacked, experts, tp - 1, tp)
    assert not bare.copies and set(bare.left_out) == set(plain)


def test_a_loader_that_is_not_a_plain_copy_is_left_to_verl():
    cfg = SMALL_MOE
    params, parts = engine_params(cfg, 1)
    stacked, experts = _tables(cfg)
    loaders = dict(engine_loaders(params), **{"model.norm.weight": "GemmaRMSNorm.weight_loader"})
    plan = build_plan(checkpoint(cfg), params, parts, stacked, experts, loaders=loaders)
    assert "not a plain copy" in plan.left_out["model.norm.weight"]
    assert "model.layers.0.input_layernorm.weight" in plan.copies


def test_the_copy_loaders_are_plain_copies_in_the_vllm_wheel():
    # what COPY_LOADERS claims, read from vLLM 0.24.0's source: each loader copies the tensor whole into the
    # parameter (the vocabulary one after narrowing to its shard), and the parameters use those loaders
    assert set(COPY_LOADERS) == {
        None,
        "default_weight_loader",
        "ReplicatedLinear.weight_loader",
        EMBEDDING_LOADER,
    }
    for name in ("default_weight_loader", "ReplicatedLinear.weight_loader"):
        src = loader_source(name)
        assert "param.data.copy_(loaded_weight)" in src and "narrow" not in src, name
        assert "param.size() == loaded_weight.size()" in src, name
    vocab = loader_source(EMBEDDING_LOADER)
    assert "loaded_weight = loaded_weight.narrow(output_dim, start_idx, shard_size)" in vocab
    assert "param[:loaded_weight.shape[0]].data.copy_(loaded_weight)" in vocab
    assert COPY_LOADERS[EMBEDDING_LOADER] and not COPY_LOADERS["ReplicatedLinear.weight_loader"]
    assert "weight_loader" not in class_methods(VOCAB, "ParallelLMHead")  # inherits the embedding's
    assert "weight_loader" not in class_init_source(LAYERNORM, "RMSNorm")  # none: default_weight_loader
    assert "self.gate = ReplicatedLinear(" in sources()[QWEN3_MOE]


def test_the_engine_side_table_agrees_with_load_weights():
    # In the engine the plan reads packed_modules_mapping (a class attribute); load_weights uses
    # stacked_params_mapping: the same parts in the same order (the plan only uses the order).
    for model in ("qwen3", "qwen3_moe"):
        packed = packed_modules_mapping(model)
        stacked = stacked_params_mapping(model)
        for fused, parts in packed.items():
            assert [w for p, w, _ in stacked if p == fused] == parts


def test_names_resolve_as_vllm_resolves_them():
    stacked, experts = _tables(SMALL_MOE)
    assert resolve("model.layers.0.mlp.experts.3.up_proj.weight", stacked, experts, True) == (
        "expert",
        "model.layers.0.mlp.experts.routed_experts.w13_weight",
        "w3",
        3,
    )
    assert resolve("model.layers.1.self_attn.k_proj.weight", stacked, experts, True)[:3] == (
        "stacked",
        "model.layers.1.self_attn.qkv_proj.weight",
        "k",
    )
    # experts.1. must not match experts.11.
    big = expert_params_mapping(12)
    assert resolve("model.layers.0.mlp.experts.11.down_proj.weight", stacked, big, True)[3] == 11


# ----------------------------------------------------------------------------- byte-exact on CPU
def _weights(cfg, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (n, (torch.randn(s, generator=g) * (0.02 if len(s) == 2 else 1.0)).to(dtype))
        for n, s in checkpoint(cfg).items()
    ]


def _garbage(params):
    out = {}
    for n, (shape, dt) in params.items():
        t = torch.empty(shape, dtype=getattr(torch, dt))
        t.view(torch.uint8).fill_(0x7E)
        out[n] = t
    return out


def _vllm_style_load(cfg, params, weights, tp, rank):
    """Quantize each full tensor (verl: v.to(bf16), then its quantizer) and copy it the way vLLM 0.24.0's loaders
    narrow it (parameter.py load_qkv_weight / load_merged_column_weight / load_row_parallel_weight; routed_experts.py
    _load_w13 / _load_w2; block scales through adjust_block_scale_shard) -- written from those loaders, not from the
    plan. Unquantized tensors as verl hands them over (uncast): default_weight_loader / ReplicatedLinear copy them
    whole, VocabParallelEmbedding narrows to the rank's vocabulary shard (padding rows zero-filled)."""
    out = _garbage(params)
    d = cfg["head_dim"]
    q_rows, kv_rows = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    for name, t in weights:
        if not name.endswith("_proj.weight"):
            dst = out[name]
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                shard = t.shape[0] // tp
                dst[:shard].copy_(t.narrow(0, rank * shard, shard))
                dst[shard:].fill_(0)
            else:
                dst.copy_(t)
            continue
        q, s = quantize_blockwise(t.to(torch.bfloat16))
        layer = name.rsplit(".", 2)[0]  # model.layers.i.self_attn / model.layers.i.mlp[.experts.j]
        proj = name.rsplit(".", 2)[1]
        if ".experts." in name:
            base, j = layer.rsplit(".experts.", 1)
            r = f"{base}.experts.routed_experts."
            e = int(j)
            if proj == "down_proj":
                c = q.shape[1] // tp
                out[r + "w2_weight"][e].copy_(q[:, rank * c : (rank + 1) * c])
                out[r + "w2_weight_scale_inv"][e].copy_(s[:, rank * c // 128 : (rank + 1) * c // 128])
            else:
                half = q.shape[0] // tp
                at = 0 if proj == "gate_proj" else half
                out[r + "w13_weight"][e][at : at + half].copy_(q[rank * half : (rank + 1) * half])
                sh = half // 128
                out[r + "w13_weight_scale_inv"][e][at // 128 : at // 128 + sh].copy_(
                    s[rank * sh : (rank + 1) * sh]
                )
        elif proj in ("q_proj", "k_proj", "v_proj"):
            sizes = {"q_proj": q_rows // tp, "k_proj": kv_rows // tp, "v_proj": kv_rows // tp}
            offset = {"q_proj": 0, "k_proj": q_rows // tp, "v_proj": (q_rows + kv_rows) // tp}[proj]
            size = sizes[proj]
            dst = f"{layer}.qkv_proj.weight"
            out[dst][offset : offset + size].copy_(q[rank * size : (rank + 1) * size])
            so, ss = offset // 128, size // 128
            out[dst + "_scale_inv"][so : so + ss].copy_(s[rank * ss : (rank + 1) * ss])
        elif proj in ("gate_proj", "up_proj"):
            size = cfg["intermediate_size"] // tp
            offset = 0 if proj == "gate_proj" else size
            dst = f"{layer}.gate_up_proj.weight"
            out[dst][offset : offset + size].copy_(q[rank * size : (rank + 1) * size])
            so, ss = offset // 128, size // 128
            out[dst + "_scale_inv"][so : so + ss].copy_(s[rank * ss : (rank + 1) * ss])
        else:  # o_proj, down_proj: row parallel, input dim sharded
            c = q.shape[1] // tp
            out[name].copy_(q[:, rank * c : (rank + 1) * c])
            out[name + "_scale_inv"].copy_(s[:, rank * c // 128 : (rank + 1) * c // 128])
    return out


def _direct(cfg, params, parts, weights, tp, rank, buckets=1, ds=None, loaders=None):
    stacked, experts = _tables(cfg)
    if ds is None:
        planner = Planner(params, parts, stacked, experts, rank, tp, loaders=loaders)
        ds = DirectSync(planner, torch.bfloat16, on_left_out=lambda *a: None)
    dst = _garbage(params)
    ds.bind(dst)
    rest = []
    step = -(-len(weights) // buckets)
    for i in range(0, len(weights), step):
        rest += ds.apply(weights[i : i + step])
    return ds, dst, rest


def _assert_bytes_equal(a, b, names):
    for n in names:
        assert torch.equal(a[n].view(torch.uint8), b[n].view(torch.uint8)), n


@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 0), (2, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_quantize_into_destination_equals_quantize_then_copy(cfg, tp, rank, dtype):
    params, parts = engine_params(cfg, tp)
    weights = _weights(cfg, dtype)
    ref = _vllm_style_load(cfg, params, weights, tp, rank)
    ds, got, rest = _direct(cfg, params, parts, weights, tp, rank, buckets=3)
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, got, fp8)
    # nothing quantizable went to the fallback; everything else did, in stream order
    assert [n for n, _ in rest] == [n for n, _ in weights if not n.endswith("_proj.weight")]
    assert ds.stats["direct_tensors"] == sum(n.endswith("_proj.weight") for n, _ in weights)
    assert ds.stats["copied_tensors"] == 0  # no loaders known: nothing is copied


@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_the_planned_copies_write_what_vllms_loaders_write(cfg, tp, rank, dtype):
    params, parts = engine_params(cfg, tp)
    weights = _weights(cfg, dtype, seed=2)
    ref = _vllm_style_load(cfg, params, weights, tp, rank)
    ds, got, rest = _direct(cfg, params, parts, weights, tp, rank, buckets=3, loaders=engine_loaders(params))
    vocab = ["model.embed_tokens.weight", "lm_head.weight"]
    copied = [n for n, _ in weights if not n.endswith("_proj.weight") and (tp == 1 or n not in vocab)]
    assert ds.stats["copied_tensors"] == len(copied)
    # every parameter the direct path wrote is byte-equal to vLLM's loaders (float32 rounds as copy_ rounds)
    _assert_bytes_equal(ref, got, [n for n in params if n not in vocab or tp == 1])
    assert [n for n, _ in rest] == ([] if tp == 1 else vocab)


def test_parts_split_over_buckets_and_the_layout_cache():
    cfg = SMALL_MOE
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, torch.bfloat16, seed=3)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    ds, got, _ = _direct(
        cfg, params, parts, weights, 1, 0, buckets=7
    )  # q/k/v and w1/w3 fall in other buckets
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, got, fp8)
    layouts = ds.stats["layouts"]
    _, got2, _ = _direct(cfg, params, parts, weights, 1, 0, buckets=7, ds=ds)  # the next sync: no new layout
    assert ds.stats["layouts"] == layouts
    _assert_bytes_equal(ref, got2, fp8)


def test_one_bucket_of_a_moe_layer_is_a_few_copies():
    cfg = dict(SMALL_MOE, num_hidden_layers=1)
    params, parts = engine_params(cfg, 1)
    ds, _, _ = _direct(cfg, params, parts, _weights(cfg, torch.bfloat16), 1, 0)
    # q,k,v -> qkv (1 run), o (1), w13 (1: gate_e, up_e alternate in the stream as in w13), w2 (1); x2 scales
    # (the w13 rows share the column count of q/k/v in the output, but land in another parameter: a new run)
    assert ds.stats["copies"] == 8


def test_cuts_off_the_block_grid_go_to_verl_with_a_reason():
    cfg = dict(SMALL_MOE, moe_intermediate_size=192)  # tp 2 -> 96 rows per rank: off the 128 grid
    params, parts = engine_params(cfg, 2)
    stacked, experts = _tables(cfg)
    plan = build_plan(checkpoint(cfg), params, parts, stacked, experts, tp_rank=1, tp_size=2)
    off = [n for n in plan.left_out if ".experts." in n]
    assert len(off) == 3 * cfg["num_experts"] * cfg["num_hidden_layers"]
    assert "block grid" in plan.left_out[off[0]]
    assert any("qkv" in p.param for p in plan.placements.values())  # the aligned parts stay direct


def test_a_parameter_that_changed_shape_is_not_written():
    cfg = SMALL_DENSE
    params, parts = engine_params(cfg, 1)
    stacked, experts = _tables(cfg)
    ds = DirectSync(Planner(params, parts, stacked, experts), torch.bfloat16, on_left_out=lambda *a: None)
    dst = _garbage(params)
    name = "model.layers.0.self_attn.qkv_proj.weight"
    dst[name] = torch.zeros(
        3, 3, dtype=torch.float8_e4m3fn
    )  # e.g. re-laid out by a kernel and not staged back
    ds.bind(dst)
    rest = ds.apply(_weights(cfg, torch.bfloat16))
    assert "model.layers.0.self_attn.q_proj.weight" in [n for n, _ in rest]
    assert torch.count_nonzero(dst[name].view(torch.uint8)) == 0


# ----------------------------------------------------------------------------- in place on verl's buffer
def _received(weights, bucket_size, device="cpu", halves=False):
    """Buckets as verl's receiver holds them (sender packing and receiver views as verl 0.9.1 does them,
    reproduced in test_verl_flat_bucket.py): per bucket a ReceivedBucket over the one buffer and its view list.
    ``halves``: every other bucket lies in the second half of a buffer twice the size, its metadata offsets
    shifted, as the pipelined sender (fused_send) places them."""
    import pickle

    from fp8spec.runtime.quantization.flat_bucket import ReceivedBucket

    from .test_verl_flat_bucket import receive, send_buckets

    out = []
    for i, (buffer, raw, ipc) in enumerate(send_buckets(weights, bucket_size, device=device)):
        # each bucket gets its own copy of the reused buffer: the test keeps them all at once
        own = buffer.clone()
        if halves:
            shift = (i % 2) * bucket_size
            own = torch.full((2 * bucket_size,), 0x7F, dtype=torch.uint8, device=device)  # NaN-ish filler
            own[shift : shift + bucket_size] = buffer
            msg = pickle.loads(raw)
            for m in msg["bucket_meta"].values():
                m["offset"] += shift if m["handle"] is None else 0
            raw = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        meta2, views2 = receive(own, raw, ipc)
        out.append(ReceivedBucket(own, meta2["bucket_meta"], views2, raw))
    return out


@pytest.mark.parametrize("halves", [False, True], ids=["one-buffer", "halves"])
@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
@pytest.mark.parametrize(
    "dtype, round_in_kernel",
    [(torch.bfloat16, True), (torch.float32, True), (torch.float32, False)],
    ids=["bf16", "fp32-rounded-by-the-quantizer", "fp32-cast-copy"],
)
def test_in_place_on_the_receive_buffer_equals_the_gathered_input(cfg, dtype, round_in_kernel, halves):
    params, parts = engine_params(cfg, 2)
    weights = _weights(cfg, dtype, seed=7)
    ref = _vllm_style_load(cfg, params, weights, 2, 1)
    stacked, experts = _tables(cfg)
    ds = DirectSync(
        Planner(params, parts, stacked, experts, 1, 2),
        torch.bfloat16,
        on_left_out=lambda *a: None,
        round_in_kernel=round_in_kernel,
    )
    dst = _garbage(params)
    ds.bind(dst)
    buckets = _received(weights, bucket_size=3 << 20, halves=halves)
    assert len(buckets) > 1
    rest, casts = [], []
    for b in buckets:
        rest += ds.apply(b.weights, b)
        casts += list(b._cast.values())
        if halves:  # cast from the bucket's first element, not the buffer's
            assert all(c.numel() <= (3 << 20) // 4 for c in casts)
    # float32: a cast copy of each bucket, or none where the quantizer rounds as it loads
    cast_copies = dtype == torch.float32 and not round_in_kernel
    assert bool(casts) == cast_copies
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, dst, fp8)
    assert ds.stats["in_place"] == sum(
        1 for b in buckets if any(n.endswith("_proj.weight") for n, _ in b.weights)
    )
    assert ds.stats["rounded_in_kernel"] == (ds.stats["in_place"] if dtype == torch.float32 and round_in_kernel else 0)
    assert [n for n, _ in rest] == [n for n, _ in weights if not n.endswith("_proj.weight")]
    # the next sync reads the same layouts in place again: no new plan, same bytes
    layouts, dst2 = ds.stats["layouts"], _garbage(params)
    ds.bind(dst2)
    for b in buckets:
        ds.apply(b.weights, b)
    assert ds.stats["layouts"] == layouts
    _assert_bytes_equal(ref, dst2, fp8)


def test_not_in_place_when_the_list_or_a_view_is_not_the_receivers():
    cfg = SMALL_DENSE
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, torch.bfloat16, seed=9)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    stacked, experts = _tables(cfg)
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    (b,) = _received(weights, bucket_size=64 << 20)
    moved = [(n, t.clone()) if n.endswith("q_proj.weight") else (n, t) for n, t in b.weights]
    for weights_in in (
        list(b.weights),
        moved,
    ):  # another list object; a tensor that is not a view of the buffer
        if weights_in is moved:
            b.weights = moved
        ds = DirectSync(Planner(params, parts, stacked, experts), torch.bfloat16, on_left_out=lambda *a: None)
        dst = _garbage(params)
        ds.bind(dst)
        ds.apply(weights_in, b)
        assert ds.stats["in_place"] == 0
        _assert_bytes_equal(ref, dst, fp8)  # the gathered input still writes the right bytes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("into_params", [False, True], ids=["copy-runs", "into-params"])
@pytest.mark.parametrize("in_place", [False, True], ids=["gathered", "in-place"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
def test_gpu_triton_direct_path_equals_the_cpu_reference(cfg, dtype, in_place, into_params):
    """The Triton path, from a gathered input and in place on a receive buffer, through staging outputs and copy
    runs or straight into the parameters, == the CPU reference; twice, the second sync from the cached tables."""
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, dtype, seed=5)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    stacked, experts = _tables(cfg)
    ds = DirectSync(
        Planner(params, parts, stacked, experts),
        torch.bfloat16,
        on_left_out=lambda *a: None,
        into_params=into_params,
    )
    on_gpu = [(n, t.cuda()) for n, t in weights]
    buckets = _received(on_gpu, bucket_size=3 << 20, device="cuda") if in_place else []
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    for sync in (1, 2):
        dst = {n: t.cuda() for n, t in _garbage(params).items()}  # new storage: the tables must follow it
        ds.bind(dst)
        if in_place:
            for b in buckets:
                ds.apply(b.weights, b)
            assert ds.stats["in_place"] == sync * len(buckets)
        else:
            ds.apply(on_gpu)
            assert ds.stats["in_place"] == 0
        launches = len(buckets) if in_place else 1
        assert ds.stats["into_params"] == (sync * launches if into_params else 0)
        _assert_bytes_equal(ref, {n: t.cpu() for n, t in dst.items()}, fp8)


def _emulate_into(flat, plan, meta, bases, params, round_to=None):
    """What the kernel does with an into-params table, on the CPU: each matrix quantized by the reference and its
    codes and scales written at base + offset, in whichever parameter holds that address (none: the test fails)."""
    spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), t.view(-1)) for t in params.values()]

    def at(addr, n, dtype):
        for lo, hi, t in spans:
            if t.dtype == dtype and lo <= addr and addr + n * dtype.itemsize <= hi:
                o = (addr - lo) // dtype.itemsize
                return t[o : o + n]
        raise AssertionError(f"address {addr:#x} ({n} x {dtype}) is in no parameter")

    for x_off, y_off, s_off, m, n, ldx, _gn, _ in meta.tolist():
        assert ldx == n
        x = flat[x_off : x_off + m * n].view(m, n)
        q, sc = quantize_blockwise(x if round_to is None else x.to(round_to), plan.block)
        at(bases[0].data_ptr() + y_off, m * n, torch.float8_e4m3fn).copy_(q.reshape(-1))
        at(bases[1].data_ptr() + 4 * s_off, sc.numel(), torch.float32).copy_(sc.reshape(-1))


def _tp1_case(cfg, dtype, seed):
    """A TP1 engine's parameters, the trainer's weights, vLLM-style loading of them, the mapping tables and the
    FP8 parameter names."""
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, dtype, seed=seed)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    return params, parts, weights, ref, _tables(cfg), fp8


@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
def test_the_into_params_table_points_where_the_loaders_copy(cfg):
    # the table the kernel writes through (output offsets from two base tensors into the parameters), read on the
    # CPU as the kernel reads it: every quantized parameter byte-equal to vLLM-style loading, at TP1; at TP2 a
    # row-parallel layer takes a column shard of its source, which no contiguous write can place: no table
    from fp8spec.runtime.weight_sync.receiver.direct_sync import into_params_layout, into_params_meta

    params, parts, weights, ref, (stacked, experts), fp8 = _tp1_case(cfg, torch.float32, 13)
    ds = DirectSync(Planner(params, parts, stacked, experts), torch.bfloat16, on_left_out=lambda *a: None)
    dst = _garbage(params)
    ds.bind(dst)
    lay = ds._layout(weights)
    flat = torch.cat([weights[i][1].reshape(-1) for i in lay.idx])  # float32: rounded as the kernel would
    bases = (torch.empty(16, dtype=torch.float8_e4m3fn), torch.empty(4))
    into = into_params_layout(lay.plan, lay.places, lay.shapes, ds.planner.params)
    assert into is not None
    meta = into_params_meta(lay.plan, into, ds._flat, bases)
    assert meta is not None and len(meta) == len(lay.idx)
    _emulate_into(flat, lay.plan, meta, bases, ds._flat, round_to=torch.bfloat16)
    _assert_bytes_equal(ref, dst, fp8)

    params2, parts2 = engine_params(cfg, 2)
    ds2 = DirectSync(Planner(params2, parts2, stacked, experts, 1, 2), torch.bfloat16, on_left_out=lambda *a: None)
    ds2.bind(_garbage(params2))
    lay2 = ds2._layout(weights)
    assert into_params_layout(lay2.plan, lay2.places, lay2.shapes, ds2.planner.params) is None


@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
def test_lazy_bucket_views_build_only_what_verl_still_loads(cfg):
    # lazy_receive.BucketViews in place of verl's view list: the same bytes, and after the first sync (which reads
    # every tensor to plan the layout) only the uncovered tensors and two address checks per bucket are built
    import pickle

    from fp8spec.runtime.quantization.flat_bucket import ReceivedBucket
    from fp8spec.runtime.weight_sync.receiver.lazy_receive import BucketViews

    params, parts, weights, ref, (stacked, experts), fp8 = _tp1_case(cfg, torch.bfloat16, 11)
    ds = DirectSync(Planner(params, parts, stacked, experts), torch.bfloat16, on_left_out=lambda *a: None)
    eager = _received(weights, bucket_size=3 << 20)

    def lazy_buckets():
        out = []
        for b in eager:
            meta = pickle.loads(b.raw)["bucket_meta"]
            out.append(
                ReceivedBucket(
                    b.buffer, meta, BucketViews(b.buffer, meta, torch.device("cpu"), False, None), b.raw
                )
            )
        return out

    for sync in range(2):
        dst = _garbage(params)
        ds.bind(dst)
        buckets, rest = lazy_buckets(), []
        for b in buckets:
            rest += ds.apply(b.weights, b)
        _assert_bytes_equal(ref, dst, fp8)
        assert [n for n, _ in rest] == [n for n, _ in weights if not n.endswith("_proj.weight")]
        assert ds.stats["in_place"] == (sync + 1) * len(buckets)
        built = sum(b.weights.built() for b in buckets)
        uncovered = len(rest)
        if sync == 0:
            assert built == len(weights)  # the layouts are planned from every tensor once
        else:
            assert built <= uncovered + 2 * len(buckets) < len(weights)


def test_a_tensor_sent_alone_with_a_fresh_handle_each_sync_reuses_its_layout():
    # verl's large-weight path: one entry whose metadata holds a new CUDA IPC handle every sync; keyed by its
    # bytes it would add a layout per sync for as long as training runs
    import pickle

    from fp8spec.runtime.quantization.flat_bucket import ReceivedBucket

    cfg = SMALL_DENSE
    params, parts = engine_params(cfg, 1)
    stacked, experts = _tables(cfg)
    ds = DirectSync(Planner(params, parts, stacked, experts), torch.bfloat16, on_left_out=lambda *a: None)
    ds.bind(_garbage(params))
    name, t = next((n, w) for n, w in _weights(cfg, torch.bfloat16, seed=3) if "embed" in n)
    for sync in range(3):
        meta = {
            name: {"name": name, "shape": t.shape, "dtype": t.dtype, "offset": 0, "handle": ("ipc", sync)}
        }
        raw = pickle.dumps({"bucket_meta": meta, "is_last": False})
        weights = [(name, t)]
        assert (
            ds.apply(weights, ReceivedBucket(torch.empty(0, dtype=torch.uint8), meta, weights, raw))
            == weights
        )
    assert ds.stats["layouts"] == 1
