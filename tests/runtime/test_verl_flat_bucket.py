"""The verl hook's flat-bucket path: one launch per received bucket, plan from verl's bucket metadata.

verl's zmq transport cannot be imported here (no zmq, no vLLM). The sender's packing and the
receiver's view building are reproduced from verl 0.9.1's
``verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py``:

* sender, ``BucketedWeightSender.async_send_weights`` lines 115-163: offsets aligned to the element
  size (129-130), a full bucket is sent when the next tensor does not fit (133-138), a tensor larger
  than the bucket goes alone with its own IPC handle (140-146, 223-237), the metadata entry
  ``{name, shape, dtype, offset, handle}`` (148-154), the copy into the one buffer (155-157), the
  message ``{"bucket_meta": …, "is_last": …}`` through ``send_pyobj`` (pickle);
* receiver, ``BucketedWeightReceiver.receive_weights`` lines 286-300: ``recv_pyobj``, then per entry a
  view ``buffer[offset : offset + size].view(dtype=dtype).view(shape)`` (294-295) or the IPC tensor
  (290-293), then ``on_bucket_received(weights, is_last)``.

The sender writes every bucket into the same buffer, so each bucket is processed before the next one
is packed, as in verl (the sender waits for the receiver's reply, line 136).
"""

from __future__ import annotations

import dataclasses
import pickle
import types

import pytest
import torch

from fp8spec.runtime import verl_patch
from fp8spec.runtime.quantization import blockquant as bq
from fp8spec.runtime.quantization import flat_bucket, verl_quant
from fp8spec.runtime.quantization import flat_launcher as fl
from fp8spec.runtime.quantization import triton_blockquant as tbq
from fp8spec.runtime.quantization.flat_bucket import ENGINE
from fp8spec.runtime.settings import QuantSettings
from fp8spec.runtime.weight_sync.receiver import flat_receive
from tests.conftest import require

FMTS = ("fp32", "ue8m0", "ue8m0_fixed")


# ------------------------------------------------------------------ verl's transport, reproduced
def send_buckets(named, bucket_size, device="cpu"):
    """Yields ``(buffer, raw_message, ipc_tensors)`` per bucket, like BucketedWeightSender does."""
    buffer = torch.empty(bucket_size, dtype=torch.uint8, device=device)
    offset = 0
    bucket_meta: dict = {}

    def msg(meta, is_last):
        return pickle.dumps({"bucket_meta": meta, "is_last": is_last}, protocol=pickle.HIGHEST_PROTOCOL)

    for name, weight in named:
        alignment = weight.element_size()
        offset = (offset + alignment - 1) // alignment * alignment
        if offset + weight.nbytes > bucket_size and len(bucket_meta) > 0:
            yield buffer, msg(bucket_meta, False), {}
            bucket_meta = {}
            offset = 0
        if offset + weight.nbytes > bucket_size:
            handle = ("ipc", name)  # stands for reduce_tensor(weight)
            meta = {name: {"name": name, "shape": weight.shape, "dtype": weight.dtype, "offset": 0, "handle": handle}}
            yield buffer, msg(meta, False), {handle: weight}
            continue
        bucket_meta[name] = {"name": name, "shape": weight.shape, "dtype": weight.dtype, "offset": offset, "handle": None}
        buffer[offset : offset + weight.nbytes].view(dtype=weight.dtype).view(weight.shape).copy_(weight)
        offset += weight.nbytes
    yield buffer, msg(bucket_meta, True), {}


def receive(buffer, raw, ipc):
    """The receiver's per-bucket loop body: metadata and ``[(name, view-or-ipc-tensor), …]``."""
    metadata = pickle.loads(raw)
    weights = []
    for name, meta in metadata["bucket_meta"].items():
        shape, dtype, offset, handle = meta["shape"], meta["dtype"], meta["offset"], meta["handle"]
        if handle is not None:
            weights.append((name, ipc[handle]))
            continue
        size = dtype.itemsize * shape.numel()
        tensor = buffer[offset : offset + size].view(dtype=dtype).view(shape)
        weights.append((name, tensor))
    return metadata, weights


def fake_quant_module():
    """Stand-in for ``verl.utils.vllm.vllm_quant_utils`` (the names the hook uses)."""

    def orig_quant_weights(weights, model, quant_config, dtype=torch.bfloat16):
        raise AssertionError("verl's per-tensor quant_weights must not run")

    return types.SimpleNamespace(
        quant_weights=orig_quant_weights,
        is_deepseek_v4_model=lambda m: False,
        is_vllm_ascend_mx_quant=lambda qc: False,
        fp8_state=types.SimpleNamespace(seen_params=set(), fp8_param_names=set()),
        _classify_quant_weight=lambda name, model, asc: "fp8" if name.endswith("proj.weight") else None,
    )


def model_stream(gen, device="cpu", layers=2, experts=4, fp32_router=True, fp32_proj=None):
    """A small Qwen3-MoE-like stream in HF order; ragged shapes, an odd-sized tensor that misaligns
    the following offsets, a 3-D expert stack, an all-zero tensor, a huge-magnitude tensor."""
    h, q, kv, inter, vocab = 256, 256, 128, 192, 300

    def w(*shape, scale=1.0, dtype=torch.bfloat16):
        rows = torch.pow(10.0, torch.empty(shape[-2] if len(shape) > 1 else 1, 1).uniform_(-4, 2, generator=gen))
        x = torch.randn(shape, generator=gen) * (rows if len(shape) > 1 else 1.0) * scale
        return x.to(dtype).to(device)

    out = [("model.embed_tokens.weight", w(vocab, h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", w(h)),
            (p + "self_attn.q_proj.weight", w(q, h)),
            (p + "self_attn.k_proj.weight", w(kv, h)),
            (p + "self_attn.v_proj.weight", w(kv, h, dtype=fp32_proj or torch.bfloat16)),
            (p + "self_attn.o_proj.weight", w(h, q)),
            (p + "self_attn.q_norm.weight", w(128)),
            (p + "self_attn.odd_bias", w(37)),  # odd element count: later offsets not 16-aligned
            (p + "mlp.gate.weight", w(experts, h, dtype=torch.float32 if fp32_router else torch.bfloat16)),
        ]
        for e in range(experts):
            out += [
                (p + f"mlp.experts.{e}.gate_proj.weight", w(inter, h)),
                (p + f"mlp.experts.{e}.up_proj.weight", w(inter, h)),
                (p + f"mlp.experts.{e}.down_proj.weight", w(h, inter)),
            ]
        out += [
            (p + "mlp.fused_experts.gate_up_proj.weight", w(2, 200, 130)),  # 3-D, ragged
            (p + "post_attention_layernorm.weight", w(h)),
        ]
    out[2][1].zero_()  # layer 0 q_proj all zero
    out += [
        ("model.layers.1.mlp.shared_expert.down_proj.weight", w(1100, 256)),  # > bucket: own IPC handle
        ("model.layers.1.mlp.big_proj.weight", w(300, 250, scale=1e30, dtype=torch.float32).to(torch.bfloat16)),
        ("model.norm.weight", w(h)),
        ("lm_head.weight", w(vocab, h)),
    ]
    return out


BUCKET = 512 << 10


def _same(a, b):
    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def run_round(mod, stream, fmt, flat=True, device="cpu", check=None, bucket=BUCKET):
    """One weight-sync round through the hook; returns the output (name, tensor) list per bucket.

    ``check(bucket_outputs, params)`` runs inside the bucket (the outputs may be reused buffers)."""
    qc = types.SimpleNamespace(weight_block_size=[128, 128])
    per_bucket = []
    for buffer, raw, ipc in send_buckets(stream, bucket, device):
        meta, weights = receive(buffer, raw, ipc)
        params = [(n, t) for n, t in weights if not n.endswith("_buffer")]  # split_buffer_updates
        if flat:
            with ENGINE.received_bucket(buffer, meta["bucket_meta"], weights, raw=raw):
                out = list(mod.quant_weights(list(params), object(), qc, dtype=torch.bfloat16))
                if check is not None:
                    check(out, params)
        else:
            out = list(mod.quant_weights(list(params), object(), qc, dtype=torch.bfloat16))
            if check is not None:
                check(out, params)
        per_bucket.append([n for n, _ in out])
    ENGINE.release_outputs()
    return per_bucket


def check_against_reference(fmt):
    def check(out, params):
        d = dict(out)
        assert len(d) == len(out)
        for n, v in params:
            if n.endswith("proj.weight"):
                rq, rs = bq.quantize_blockwise(v.to(torch.bfloat16), (128, 128), fmt)
                assert _same(d[n], rq), n
                assert torch.equal(d[bq.scale_name(n)], rs), n
            else:
                assert d[n] is v

    return check


@pytest.fixture
def hook(monkeypatch):
    ENGINE.clear()
    for k in list(ENGINE.stats):
        ENGINE.stats[k] = 0

    def make(fmt="fp32", **switches):
        """``switches``: QuantSettings fields other than their defaults (the plain paths the defaults replace)."""
        patches = {"fast_block_quant"} | ({"ue8m0_scales"} if fmt != "fp32" else set())
        if fmt != "fp32":
            monkeypatch.setenv("FP8SPEC_UE8M0_RULE", fmt)
        mod = fake_quant_module()
        verl_quant.patch_vllm_quant(mod, dataclasses.replace(QuantSettings.from_env(patches), **switches))
        return mod

    yield make
    ENGINE.clear()


@pytest.mark.parametrize("fmt", FMTS)
def test_flat_bucket_bit_identical_and_same_stream_as_list_path(hook, fmt):
    gen = torch.Generator().manual_seed(11)
    stream = model_stream(gen)
    mod = hook(fmt)
    flat_names = run_round(mod, stream, fmt, flat=True, check=check_against_reference(fmt))
    st = dict(ENGINE.stats)
    # every bucket with a selected tensor in the flat buffer took one launch; the tensor larger than a
    # bucket (own IPC handle) and the buckets with nothing to quantize did not
    metas = [pickle.loads(raw)["bucket_meta"] for _, raw, _ in send_buckets(stream, BUCKET)]
    n_flat = sum(any(n.endswith("proj.weight") and m["handle"] is None for n, m in meta.items()) for meta in metas)
    assert len(flat_names) == len(metas) >= 5 and n_flat >= 4
    assert st["flat_launches"] == st["plan_builds"] == n_flat and st["list_path"] == len(metas) - n_flat
    assert st["not_flat"] == 1  # the shared_expert tensor that travelled with its own IPC handle
    list_names = run_round(mod, stream, fmt, flat=False, check=check_against_reference(fmt))
    assert flat_names == list_names  # same names, same order (verl's order: w, w_scale_inv, …)


def _current_layout(params):
    """The cached layout the hook used for this bucket (None when it took the list path)."""
    ctx = ENGINE.bucket
    lay = None
    for lean in (True, False):  # the key the hook used depends on the lean_prelaunch setting
        lay = lay or ENGINE.layouts.get((ctx.layout_key(lean), len(params), torch.bfloat16, (128, 128)))
    if lay is not None:
        assert lay.sel == tuple(i for i, (n, _) in enumerate(params) if n.endswith("proj.weight"))
    return lay, ctx


def test_plan_built_from_metadata_matches_sender_offsets(hook):
    gen = torch.Generator().manual_seed(12)
    stream = model_stream(gen)
    mod = hook()
    got = []

    def check(out, params):
        lay, ctx = _current_layout(params)
        if lay is None:
            return
        got.append(lay.plan.x_offsets)
        # the kernel's table: per matrix, x_off = tensor offset (+ expert index * M * N), row stride N
        m = lay.plan.meta_dev.cpu()
        rows = [(o, shp) for o, shp in zip(lay.plan.x_offsets, lay.plan.shapes)]
        want = []
        for o, shp in rows:
            lead = shp[0] if len(shp) == 3 else 1
            want += [[o + e * shp[-2] * shp[-1], shp[-2], shp[-1], shp[-1]] for e in range(lead)]
        assert m[:, [0, 3, 4, 5]].tolist() == want

    # independently: the element offsets the sender gives every selected tensor of every bucket
    expected = []
    for _buffer, raw, _ipc in send_buckets(stream, BUCKET):
        meta = pickle.loads(raw)["bucket_meta"]
        e = [m["offset"] // 2 for n, m in meta.items() if n.endswith("proj.weight") and m["handle"] is None]
        if e:
            expected.append(e)
    run_round(mod, stream, "fp32", check=check)
    assert got == expected and len(got) >= 4


def _emulate_kernel(flat, plan, fmt):
    """The Triton kernel's addressing, in torch: for each row of META read the matrix at
    ``X + x_off`` with row stride ``ldx``, quantize it, store at ``Y + y_off`` / ``S + s_off``."""
    meta = plan.meta_dev.cpu()
    y = torch.full((plan.y_total,), 0xFF, dtype=torch.uint8).view(bq.FP8_DTYPE)
    s = torch.full((plan.s_total,), float("nan"))
    counts = torch.bincount(plan.tile2mat.cpu().long(), minlength=len(meta))
    start = 0
    for r, (x_off, y_off, s_off, mm, nn, ldx, gn, t0) in enumerate(meta.tolist()):
        gm = -(-mm // plan.block[0])
        assert counts[r] == gm * gn and t0 == start  # the tile -> matrix map covers every block once
        start += gm * gn
        x = flat.as_strided((mm, nn), (ldx, 1), x_off)
        q, sc = bq.quantize_blockwise(x, plan.block, fmt)
        y[y_off : y_off + mm * nn] = q.reshape(-1)
        s[s_off : s_off + gm * gn] = sc.reshape(-1)
    return plan.outputs(y, s)


@pytest.mark.parametrize("fmt", ["fp32", "ue8m0_fixed"])
def test_kernel_table_from_metadata_reproduces_reference(hook, fmt):
    """The META table built from verl's metadata, read the way the GPU kernel reads it, gives the
    reference bit for bit (on CPU the hook itself quantizes through the reference)."""
    gen = torch.Generator().manual_seed(13)
    stream = model_stream(gen)
    mod = hook(fmt)
    checked, aligned = [0], []

    def check(out, params):
        lay, ctx = _current_layout(params)
        if lay is None:
            return
        emu = _emulate_kernel(ctx.typed(torch.bfloat16), lay.plan, fmt)
        sel = [t for n, t in params if n.endswith("proj.weight")]
        assert len(sel) == len(emu)
        for t, (q, sc) in zip(sel, emu):
            rq, rs = bq.quantize_blockwise(t, (128, 128), fmt)
            assert _same(q, rq) and torch.equal(sc, rs)
            checked[0] += 1
        aligned.append(lay.plan.aligned)

    run_round(mod, stream, fmt, check=check)
    assert checked[0] > 20
    assert False in aligned  # the odd-sized tensor misaligned a later offset (unaligned kernel variant)


def test_layout_cache_hit_next_step_reuses_plan_and_outputs(hook):
    gen = torch.Generator().manual_seed(14)
    mod = hook()
    stream1 = model_stream(gen)
    first = {}

    def keep(store):
        def check(out, params):
            check_against_reference("fp32")(out, params)
            for n, t in out:
                if n.endswith("proj.weight"):
                    store[n] = t

        return check

    run_round(mod, stream1, "fp32", check=keep(first))
    builds = ENGINE.stats["plan_builds"]
    assert builds > 0 and ENGINE.stats["cache_hits"] == 0
    layouts = list(ENGINE.layouts.values())
    # released after the round: no memory held between weight syncs
    arena = ENGINE.arenas[torch.device("cpu")]
    held = arena.y.untyped_storage().nbytes()  # an int: a failing assert prints no released tensor
    assert held == 0
    # next step: same layout, new values, freshly built metadata (new dicts, new pickle)
    stream2 = [(n, t + 0.5 * torch.randn(t.shape, generator=gen).to(t.dtype)) for n, t in stream1]
    second = {}
    run_round(mod, stream2, "fp32", check=keep(second))
    assert ENGINE.stats["plan_builds"] == builds  # nothing rebuilt
    assert ENGINE.stats["cache_hits"] == builds
    assert list(ENGINE.layouts.values()) == layouts
    # the same output view objects (no per-tensor work); compare ids only: the first round's views
    # point at released memory between rounds, reading them would be a use-after-free
    assert sorted(second) == sorted(first)
    flat = [n for n in first if "shared_expert" not in n]  # that one came with its own IPC handle
    assert [id(second[n]) for n in flat] == [id(first[n]) for n in flat]
    assert id(second["model.layers.1.mlp.shared_expert.down_proj.weight"]) != id(
        first["model.layers.1.mlp.shared_expert.down_proj.weight"]
    )


def test_changed_layout_is_a_miss(hook):
    gen = torch.Generator().manual_seed(15)
    mod = hook()
    stream = model_stream(gen, layers=1)
    run_round(mod, stream, "fp32", check=check_against_reference("fp32"))
    builds = ENGINE.stats["plan_builds"]
    # one tensor's shape changes (same names, same byte count): the offsets of the bucket are the
    # same but the layout is not
    i = next(i for i, (n, _) in enumerate(stream) if n.endswith("k_proj.weight"))
    n, t = stream[i]
    assert t.shape[0] != t.shape[1]
    stream[i] = (n, t.reshape(t.shape[1], t.shape[0]).clone())
    run_round(mod, stream, "fp32", check=check_against_reference("fp32"))
    assert ENGINE.stats["plan_builds"] == builds + 1


def test_selection_change_under_same_metadata(hook):
    """The cached layout is launched before verl's selection runs; if the selection then differs
    (verl clears its FP8 name cache every call, vllm_quant_utils.py 364-365), the bucket is redone."""
    gen = torch.Generator().manual_seed(20)
    mod = hook()
    stream = model_stream(gen, layers=1)
    run_round(mod, stream, "fp32", check=check_against_reference("fp32"))
    builds, launches = ENGINE.stats["plan_builds"], ENGINE.stats["flat_launches"]
    orig = mod._classify_quant_weight
    mod._classify_quant_weight = lambda n, m, a: None if "up_proj" in n else orig(n, m, a)

    def check(out, params):
        d = dict(out)
        for n, v in params:
            if n.endswith("proj.weight") and "up_proj" not in n:
                rq, rs = bq.quantize_blockwise(v)
                assert _same(d[n], rq) and torch.equal(d[bq.scale_name(n)], rs), n
            else:
                assert d[n] is v and bq.scale_name(n) not in d

    run_round(mod, stream, "fp32", check=check)
    n_up = sum(any("up_proj" in n for n in pickle.loads(raw)["bucket_meta"]) for _, raw, _ in send_buckets(stream, BUCKET))
    assert n_up >= 2
    assert ENGINE.stats["plan_builds"] == builds + n_up  # re-planned for the new selection
    # every cached bucket launched once ahead of the selection, those with an up_proj once more
    assert ENGINE.stats["flat_launches"] == launches + builds + n_up
    mod._classify_quant_weight = orig


def test_fallback_mixed_dtypes(hook):
    gen = torch.Generator().manual_seed(16)
    mod = hook()
    stream = model_stream(gen, fp32_proj=torch.float32)  # v_proj arrives in fp32: cast needed
    run_round(mod, stream, "fp32", check=check_against_reference("fp32"))
    st = ENGINE.stats
    assert st["list_path"] >= 2 and st["not_flat"] >= 2  # both v_proj buckets took the list path
    assert st["flat_launches"] >= 1  # the other buckets did not


@pytest.mark.parametrize("fmt", FMTS)
def test_fp32_buckets_of_an_fsdp_trainer_are_cast_once_and_quantized_flat(hook, fmt):
    """FSDP streams float32 master weights (H200 RL run, docs/results.md#rl-runs: every sync took the list path).
    A bucket of float32 tensors is cast to bf16 once and quantized flat; bits as verl's ``v.to(bf16)``."""
    gen = torch.Generator().manual_seed(19)
    stream = [(n, t.float()) for n, t in model_stream(gen)]
    mod = hook(fmt)
    reference = check_against_reference(fmt)
    cast_sizes = []

    def check(out, params):
        reference(out, params)
        ctx = ENGINE.bucket
        for copy in ctx._cast.values():  # only what the plan reads was cast, not the whole bucket buffer
            assert any(lay.plan.x_extent == copy.numel() for lay in ENGINE.layouts.values())
            cast_sizes.append((copy.numel(), ctx.buffer.numel() // 4))

    for _ in range(2):  # second round: cached plans
        run_round(mod, stream, fmt, check=check)
    assert cast_sizes and all(n <= whole for n, whole in cast_sizes) and any(n < whole for n, whole in cast_sizes)
    st = dict(ENGINE.stats)
    metas = [pickle.loads(raw)["bucket_meta"] for _, raw, _ in send_buckets(stream, BUCKET)]
    n_flat = sum(any(n.endswith("proj.weight") and m["handle"] is None for n, m in meta.items()) for meta in metas)
    assert n_flat >= 4 and st["plan_builds"] == n_flat and st["flat_launches"] == 2 * n_flat
    assert all(lay.src == torch.float32 for lay in ENGINE.layouts.values())


def test_fp32_bucket_into_fp8_dtype_is_not_cast(hook):
    """Only the casts verl makes (float32 to bf16/fp16) are done on the whole buffer."""
    assert (torch.float32, torch.bfloat16) in flat_bucket.CASTS
    assert (torch.bfloat16, torch.float32) not in flat_bucket.CASTS
    gen = torch.Generator().manual_seed(20)
    stream = [(n, t.half()) for n, t in model_stream(gen, layers=1)]  # fp16 bucket, bf16 quantization
    run_round(hook(), stream, "fp32", check=check_against_reference("fp32"))
    assert ENGINE.stats["flat_launches"] == 0 and ENGINE.stats["list_path"] >= 1


def test_fallback_not_a_flat_buffer(hook):
    gen = torch.Generator().manual_seed(17)
    mod = hook()
    stream = model_stream(gen, layers=1)
    qc = types.SimpleNamespace(weight_block_size=[128, 128])
    check = check_against_reference("fp32")
    # (1) no received bucket (e.g. another caller of load_quanted_weights): list path
    params = [(n, t) for n, t in stream[:6]]
    check(list(mod.quant_weights(params, object(), qc)), params)
    assert ENGINE.stats["list_path"] == 1 and ENGINE.stats["flat_launches"] == 0
    # (2) use_shm-like: every tensor copied on its own (bucketed_weight_transfer.py 296-297)
    for buffer, raw, ipc in send_buckets(stream, BUCKET):
        meta, weights = receive(buffer, raw, ipc)
        copied = [(n, t.clone()) for n, t in weights]
        with ENGINE.received_bucket(buffer, meta["bucket_meta"], weights, raw=raw):
            check(list(mod.quant_weights(copied, object(), qc)), copied)
    assert ENGINE.stats["flat_launches"] == 0
    # (3) a cached layout, then a tensor replaced on the way: the identity check refuses the cache
    run_round(mod, stream, "fp32", check=check)
    hits_before = ENGINE.stats["not_flat"]
    for buffer, raw, ipc in send_buckets(stream, BUCKET):
        meta, weights = receive(buffer, raw, ipc)
        params = list(weights)
        j = next((i for i, (n, _) in enumerate(params) if n.endswith("o_proj.weight")), None)
        if j is not None:
            params[j] = (params[j][0], params[j][1].clone())
        with ENGINE.received_bucket(buffer, meta["bucket_meta"], weights, raw=raw):
            check(list(mod.quant_weights(params, object(), qc)), params)
    # +1 for the bucket whose o_proj was replaced, +1 for the IPC-handle bucket (never flat)
    assert ENGINE.stats["not_flat"] == hits_before + 2
    # (4) the flat path switched off
    ENGINE.clear()
    mod2 = hook(flat_buckets=False)
    launches = ENGINE.stats["flat_launches"]
    run_round(mod2, stream, "fp32", check=check)
    assert ENGINE.stats["flat_launches"] == launches


def test_without_output_reuse(hook):
    gen = torch.Generator().manual_seed(18)
    mod = hook(reuse_outputs=False)
    stream = model_stream(gen, layers=1)
    a, b = {}, {}

    def keep(store):
        def check(out, params):
            check_against_reference("fp32")(out, params)
            store.update((n, t) for n, t in out if n.endswith("proj.weight"))

        return check

    run_round(mod, stream, "fp32", check=keep(a))
    run_round(mod, stream, "fp32", check=keep(b))
    assert ENGINE.stats["cache_hits"] > 0 and not ENGINE.arenas
    assert all(b[n] is not a[n] and _same(b[n], a[n]) for n in a)  # fresh outputs, same values


# ------------------------------------------------------- the receiver patch on a stand-in receiver
class FakeSocket:
    """pyzmq's REP socket as the receiver uses it; ``recv_pyobj`` is pyzmq's definition. Each message
    comes with what the sender did before sending it (fill the shared buffer)."""

    def __init__(self, messages):
        self.messages = list(messages)
        self.sent = []

    def connect(self, addr):
        self.addr = addr

    def recv(self, flags=0):
        raw, before = self.messages.pop(0)
        before()
        return raw

    def recv_pyobj(self, flags=0):
        return pickle.loads(self.recv(flags))

    def send(self, data, flags=0):
        self.sent.append(data)

    def close(self):
        self.closed = True


def fake_transfer_module(messages, ipc_buffers, events):
    """verl 0.9.1's own ``bucketed_weight_transfer`` module (loaded from its file, CPU device module) whose receiver
    gets its transport stubbed: the socket replays ``messages``, the buffer handle maps into ``ipc_buffers``.
    ``receive_weights`` is verl's, unchanged."""
    require("zmq")
    require("verl")
    from .test_sync_timing import CpuDevice, _module

    real = _module(CpuDevice())

    class BucketedWeightReceiver(real.BucketedWeightReceiver):
        def _init_socket(self):
            self.socket = FakeSocket(messages)
            self.socket.connect(self.zmq_handle)

        def _init_buffer(self):
            self.buffer = ipc_buffers[self.socket.recv_pyobj()]  # stands for rebuild_ipc(handle)
            self.socket.send(b"")

        def _cleanup(self):
            events.append("cleanup")
            super()._cleanup()

    real.BucketedWeightReceiver = BucketedWeightReceiver
    return real


def test_receiver_patch_feeds_quant_weights(hook):
    gen = torch.Generator().manual_seed(19)
    mod = hook()
    stream = [(n, t) for n, t in model_stream(gen, layers=1) if "shared_expert" not in n]
    size = 1 << 20
    shared = torch.empty(size, dtype=torch.uint8)
    messages = [(pickle.dumps("handle-0"), lambda: None)]
    for buffer, raw, ipc in send_buckets(stream, size):
        assert not ipc
        messages.append((raw, lambda snap=buffer.clone(): shared.copy_(snap)))  # sender filled the buffer
    n_buckets = len(messages) - 1
    has_sel = [any(n.endswith("proj.weight") for n in pickle.loads(r)["bucket_meta"]) for r, _ in messages[1:]]
    assert n_buckets >= 3 and has_sel[-1] is False  # the last bucket holds only lm_head

    def launches(start):
        out, k = [], start
        for h in has_sel:
            k += h
            out.append(k)
        return out

    qc = types.SimpleNamespace(weight_block_size=[128, 128])

    def run(use_shm):
        events, seen = [], []
        transfer = fake_transfer_module(messages, {"handle-0": shared}, events)
        flat_receive.patch_bucket_receiver(transfer)
        flat_receive.patch_bucket_receiver(transfer)  # idempotent

        def on_bucket(weights, is_last):
            out = list(mod.quant_weights(list(weights), object(), qc))
            check_against_reference("fp32")(out, weights)
            seen.append(ENGINE.stats["flat_launches"])

        transfer.BucketedWeightReceiver("ipc:///tmp/x", torch.device("cpu"), use_shm=use_shm).receive_weights(on_bucket)
        assert events == ["cleanup"] and len(seen) == n_buckets
        return seen

    n_flat = sum(has_sel)
    assert run(False) == launches(0)  # one launch per bucket that has something to quantize
    held = ENGINE.arenas[torch.device("cpu")].y.untyped_storage().nbytes()
    assert held == 0  # released
    assert ENGINE.bucket is None
    assert run(False) == launches(n_flat)
    assert ENGINE.stats["cache_hits"] == n_flat  # second round: all cached
    assert run(True) == [2 * n_flat] * n_buckets  # shared memory: copies, list path


def test_patch_vllm_quant_registers_receiver_hook(hook, monkeypatch):
    calls = []
    from fp8spec.runtime import _importhook

    monkeypatch.setattr(_importhook, "when_imported", lambda name, cb: calls.append((name, cb)))
    hook()
    assert [(name, cb.func, cb.keywords) for name, cb in calls] == [
        (verl_patch.MOD_BUCKET_TRANSFER, flat_receive.patch_bucket_receiver, {"engine": ENGINE})]
    calls.clear()
    mod = fake_quant_module()
    verl_quant.patch_vllm_quant(mod, QuantSettings.from_env(set()))  # reference backend: no flat path
    assert calls == []


# --------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("knobs", ["defaults", "all_on", "all_off"])
@pytest.mark.parametrize("fmt", FMTS)
def test_gpu_flat_bucket_bit_identical(hook, fmt, knobs):
    if not tbq.triton_available():
        pytest.skip("triton not available")
    gen = torch.Generator().manual_seed(21)
    switches = {} if knobs == "defaults" else _combo((knobs == "all_on",) * 2)
    mod = hook(fmt, **switches)
    fl.reset_fast_launch()
    for _step in range(2):  # second step: cached plans and reused output views
        stream = model_stream(gen, device="cuda")
        if knobs == "all_on":  # an FSDP trainer's float32 buckets (cast once on the device)
            stream = [(n, t.float()) for n, t in stream]
        p = torch.empty(1 << 26, dtype=torch.uint8, device="cuda").fill_(0xFF)  # poison freed memory
        del p
        run_round(mod, stream, fmt, device="cuda", check=check_against_reference(fmt))
    st = ENGINE.stats
    assert st["flat_launches"] > 0 and st["cache_hits"] == st["plan_builds"]
    if knobs == "all_on":  # the second step went through the compiled kernel's runner
        assert fl.FAST_STATS["fast"] == st["cache_hits"] and fl.FAST_STATS["fallbacks"] == 0


# ------------------------------------------------------------ the flat path's host-side shortcuts
KNOBS = ("lean_prelaunch", "fast_launch")


def test_shortcuts_are_always_on_and_read_no_environment(monkeypatch):
    # BENCHMARKS.md section 3: on by default since they were measured; no variable turns them off
    for name in ("FP8SPEC_QUANT_LEAN_PRELAUNCH", "FP8SPEC_QUANT_FAST_LAUNCH", "FP8SPEC_QUANT_FLAT_BUCKETS",
                 "FP8SPEC_QUANT_REUSE_OUTPUTS"):
        monkeypatch.setenv(name, "0")
    st = QuantSettings.from_env({"fast_block_quant"})
    assert st.flat_buckets and st.reuse_outputs and st.lean_prelaunch and st.fast_launch


def _combo(bits):
    return dict(zip(KNOBS, map(bool, bits)))


@pytest.mark.parametrize("bits", [(a, b) for a in (0, 1) for b in (0, 1)])
def test_every_knob_combination_bit_identical_over_two_rounds(hook, bits):
    gen = torch.Generator().manual_seed(30)
    stream = model_stream(gen, layers=1)
    mod = hook(**_combo(bits))
    names = [run_round(mod, stream, "fp32", check=check_against_reference("fp32")) for _ in range(2)]
    st = ENGINE.stats
    assert st["plan_builds"] > 0 and st["cache_hits"] == st["plan_builds"] and st["spec_discarded"] == 0
    assert names[0] == names[1] == run_round(mod, stream, "fp32", flat=False)
    held = ENGINE.arenas[torch.device("cpu")].y.untyped_storage().nbytes()
    assert held == 0  # the output memory is given back after every round


def test_fast_launch_uses_one_launcher_per_layout_and_format(hook):
    gen = torch.Generator().manual_seed(31)
    stream = model_stream(gen, layers=1)
    mods = {fmt: hook(fmt, fast_launch=True) for fmt in ("fp32", "ue8m0_fixed")}
    for _ in range(2):
        for fmt, mod in mods.items():
            run_round(mod, stream, fmt, check=check_against_reference(fmt))
    lays = list(ENGINE.layouts.values())
    assert lays and all(sorted(lay.launchers) == ["fp32", "ue8m0_fixed"] for lay in lays)
    for lay in lays:  # bound to the shared output memory
        for la in lay.launchers.values():
            assert la.y.untyped_storage() is ENGINE.arenas[torch.device("cpu")].y.untyped_storage()


@pytest.mark.parametrize("lean", ["0", "1"])
def test_changed_layout_is_a_miss_with_either_key(hook, lean):
    gen = torch.Generator().manual_seed(32)
    mod = hook(lean_prelaunch=lean == "1")
    stream = model_stream(gen, layers=1)
    run_round(mod, stream, "fp32", check=check_against_reference("fp32"))
    builds = ENGINE.stats["plan_builds"]
    i = next(i for i, (n, _) in enumerate(stream) if n.endswith("k_proj.weight"))
    n, t = stream[i]
    stream[i] = (n, t.reshape(t.shape[1], t.shape[0]).clone())
    run_round(mod, stream, "fp32", check=check_against_reference("fp32"))
    assert ENGINE.stats["plan_builds"] == builds + 1
    assert ENGINE.stats["spec_discarded"] == 0


def test_raw_key_compares_every_byte():
    raw = pickle.dumps({"bucket_meta": {f"w{i}": {"offset": i} for i in range(200)}, "is_last": False})
    k = flat_bucket.RawKey(raw)
    same = flat_bucket.RawKey(bytes(bytearray(raw)))
    assert k == same and hash(k) == hash(same) and {k: 1}[same] == 1
    mid = len(raw) // 2
    other = raw[:mid] + bytes([raw[mid] ^ 1]) + raw[mid + 1 :]  # same length, same ends
    ko = flat_bucket.RawKey(other)
    assert hash(ko) == hash(k) and ko != k and {k: 1}.get(ko) is None
    assert k != ("raw", raw) and flat_bucket.RawKey(raw + b"x") != k


def test_lean_replaced_tensor_discards_the_speculative_launch(hook):
    """With the identity check after the launch, a bucket whose selected tensors are not the
    receiver's views is launched, found out, and redone on the list path; the outputs are right."""
    gen = torch.Generator().manual_seed(33)
    mod = hook(lean_prelaunch=True)
    stream = model_stream(gen, layers=1)
    qc = types.SimpleNamespace(weight_block_size=[128, 128])
    check = check_against_reference("fp32")
    run_round(mod, stream, "fp32", check=check)
    st = ENGINE.stats
    before = dict(st)
    n_replaced = 0
    for buffer, raw, ipc in send_buckets(stream, BUCKET):
        meta, weights = receive(buffer, raw, ipc)
        params = list(weights)
        j = next((i for i, (n, _) in enumerate(params) if n.endswith("o_proj.weight")), None)
        if j is not None:
            params[j] = (params[j][0], params[j][1].clone() * 3)  # replaced, and different values
            n_replaced += 1
        with ENGINE.received_bucket(buffer, meta["bucket_meta"], weights, raw=raw):
            check(list(mod.quant_weights(params, object(), qc)), params)
    assert n_replaced >= 1
    assert st["spec_discarded"] == before["spec_discarded"] + n_replaced
    assert st["list_path"] == before["list_path"] + n_replaced + 1  # + the IPC-handle bucket


def test_lean_refuses_a_buffer_shorter_than_the_plan(hook):
    """Same metadata bytes, but the buffer handed in is shorter than the cached plan reads: no launch
    (the O(1) bound check runs before the launch), list path."""
    gen = torch.Generator().manual_seed(34)
    mod = hook(lean_prelaunch=True)
    stream = model_stream(gen, layers=1)
    qc = types.SimpleNamespace(weight_block_size=[128, 128])
    check = check_against_reference("fp32")
    run_round(mod, stream, "fp32", check=check)
    st = ENGINE.stats
    launches, lists = st["flat_launches"], st["list_path"]
    buffer, raw, ipc = next(iter(send_buckets(stream, BUCKET)))
    meta, weights = receive(buffer, raw, ipc)
    short = buffer[: 1024]
    with ENGINE.received_bucket(short, meta["bucket_meta"], weights, raw=raw):
        check(list(mod.quant_weights(list(weights), object(), qc)), weights)
    assert st["flat_launches"] == launches and st["list_path"] == lists + 1
