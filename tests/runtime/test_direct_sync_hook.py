"""The ``direct_sync`` runtime patch (fp8spec/runtime/weight_sync/receiver/direct_sync_hook.py) on CPU.

* Registration: ``FP8SPEC_RUNTIME_PATCHES=direct_sync`` registers one import hook, on verl's vLLM worker extension
  module, and imports no engine, no verl and nothing of fp8spec outside the runtime.
* The engine-side tables: ``packed_modules_mapping`` (read from the vLLM 0.24.0 wheel) plans exactly what
  ``stacked_params_mapping`` plans.
* Routing through the wrapped extension: the extension class here is a plain object with verl's two method
  signatures (verl's own module refuses to import without vLLM); the model is a torch module tree with vLLM's
  parameter names and shapes, its class's ``packed_modules_mapping`` and expert mapping from the wheel. Covered
  tensors land byte-equal to quantize-then-copy as vLLM's loaders copy, the rest reach verl's ``_update_weights``
  in order, each sync logs its counts, the plan is built once, LoRA syncs and unreadable engines go to verl whole.
The real extension in the real engine: the GPU test below and the device plan (benchmarks/weight_sync/README.md)."""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch
from torch import nn

from fp8spec.runtime.quantization.flat_bucket import FlatBucketEngine
from fp8spec.runtime.verl_patch import MOD_BUCKET_TRANSFER
from fp8spec.runtime.weight_sync.receiver import direct_sync_hook as hook

from ._plan import build_plan
from ._qwen_shapes import checkpoint, engine_loaders, engine_params
from ._vllm_tables import expert_params_mapping, packed_modules_mapping, stacked_params_mapping
from .test_activation import CHECK, _run
from .test_direct_sync import (
    SMALL_DENSE,
    SMALL_MOE,
    _assert_bytes_equal,
    _garbage,
    _vllm_style_load,
    _weights,
)

pytestmark = pytest.mark.slow  # the vLLM wheel comes from the snapshot cache


def test_activation_registers_the_worker_extension_hook_only():
    r = _run(CHECK, {"FP8SPEC_RUNTIME_PATCHES": "direct_sync"})
    assert r["active"] == ["direct_sync"]
    # the worker extension, and verl's bucket receiver (its flat buffer: the direct path reads its input in place)
    assert set(r["pending"]) == {hook.MOD_VLLM_EXT, MOD_BUCKET_TRANSFER} and r["bad"] == []


@pytest.mark.parametrize("model,cfg", [("qwen3", SMALL_DENSE), ("qwen3_moe", SMALL_MOE)])
def test_packed_modules_mapping_plans_what_stacked_params_mapping_plans(model, cfg):
    params, parts = engine_params(cfg, 2)
    experts = expert_params_mapping(cfg["num_experts"]) if cfg.get("num_experts") else []
    a = build_plan(checkpoint(cfg), params, parts, stacked_params_mapping(model), experts, 1, 2)
    b = build_plan(
        checkpoint(cfg), params, parts, hook.stacked_from_packed(packed_modules_mapping(model)), experts, 1, 2
    )
    assert a.placements and a.placements == b.placements and a.left_out == b.left_out


def _loader(qualname):
    def loader(param, loaded_weight):
        raise AssertionError("the direct path does not call a loader")

    loader.__qualname__ = qualname
    return loader


def _model(cfg, params, parts, dst, loaders=None):
    """A module tree holding ``dst`` under vLLM's parameter names; fused layers carry ``output_sizes``, the
    unquantized parameters a ``weight_loader`` named as vLLM's (``loaders``, default ``engine_loaders``)."""
    moe = bool(cfg.get("num_experts"))
    loaders = engine_loaders(params) if loaders is None else loaders

    class Engine(nn.Module):
        packed_modules_mapping = packed_modules_mapping("qwen3_moe" if moe else "qwen3")

    root = Engine()
    for name, t in dst.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, nn.Parameter(t, requires_grad=False))
        if loaders.get(name):
            getattr(mod, leaf).weight_loader = _loader(loaders[name])
    for fused, rows in parts.items():
        root.get_submodule(fused).output_sizes = list(rows)
    if moe:
        mapping = expert_params_mapping(cfg["num_experts"])
        root.model.get_expert_mapping = lambda: mapping
    return root


class Ext:
    """verl's extension, reduced to its two signatures: update_weights_from_ipc calls _update_weights per bucket."""

    def __init__(self, model, buckets):
        self.model_runner = types.SimpleNamespace(
            model=model,
            vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(dtype=torch.bfloat16)),
        )
        self.buckets, self.to_verl = buckets, []

    def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
        for b in self.buckets:
            self._update_weights(b, peft_config=peft_config, base_sync_done=base_sync_done)

    def _update_weights(self, weights, peft_config, base_sync_done):
        self.to_verl.append([n for n, _ in weights])


def _patched(tp=(0, 1)):
    mod = types.SimpleNamespace(vLLMColocateWorkerExtension=type("X", (Ext,), {}))
    hook.patch_worker_extension(mod, factory=lambda: hook.DirectState(tp=lambda: tp))
    hook.patch_worker_extension(mod)  # idempotent: the second call wraps nothing
    return mod.vLLMColocateWorkerExtension


@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 1)])
def test_buckets_route_direct_and_the_rest_to_verl(cfg, tp, rank, caplog):
    params, parts = engine_params(cfg, tp)
    weights = _weights(cfg, torch.float32)
    ref = _vllm_style_load(cfg, params, weights, tp, rank)
    dst = _garbage(params)
    model = _model(cfg, params, parts, dst)
    step = -(-len(weights) // 3)
    ext = _patched((rank, tp))(model, [weights[i : i + step] for i in range(0, len(weights), step)])
    caplog.set_level(logging.INFO, logger="fp8spec.runtime.weight_sync.receiver.direct_sync")
    for _ in range(2):
        ext.update_weights_from_ipc(peft_config=None, base_sync_done=True)
    # at tp 2 the embedding and lm_head are vocabulary shards: verl's loader narrows them
    rest = [] if tp == 1 else ["model.embed_tokens.weight", "lm_head.weight"]
    _assert_bytes_equal(
        ref, {n: p.data for n, p in model.named_parameters()}, [n for n in params if n not in rest]
    )
    assert [n for b in ext.to_verl for n in b] == rest * 2  # in order, both syncs
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("plan built" in m for m in msgs) == 1
    direct = len(weights) - len(rest)
    quantized = sum(n.endswith("_proj.weight") for n, _ in weights)
    calls = 0 if tp == 1 else 2  # one per bucket holding an uncovered tensor (the first and the last)
    assert [m.split(": ", 1)[1].split(", 3 buckets")[0] for m in msgs if "sync " in m and "tensors" in m] == [
        f"sync {i}: {direct} tensors written into the engine's parameters ({quantized} quantized, "
        f"{direct - quantized} copied), {len(rest)} through verl's receiver in {calls} calls"
        for i in (1, 2)  # verl's post-load step is not imported here, so nothing is kept back
    ]
    assert ext._fp8spec_direct_stats == {
        "buckets": 3,
        "direct": direct,
        "copied": direct - quantized,
        "verl": len(rest),
        "verl_calls": calls,
        "views": 0,  # plain lists: nothing built lazily
        "lazy_tensors": 0,
        "early_acks": 0,  # no receiver here: nothing acked on receipt
        "syncs": 2,
        "broken": None,
    }


def test_lora_syncs_and_unreadable_engines_go_to_verl_whole(caplog):
    cfg = SMALL_DENSE
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, torch.bfloat16)
    model = _model(cfg, params, parts, _garbage(params))
    before = {n: p.data.clone() for n, p in model.named_parameters()}
    ext = _patched()(model, [weights])
    ext.update_weights_from_ipc(peft_config={"r": 8}, base_sync_done=True)
    assert ext.to_verl == [[n for n, _ in weights]]
    assert ext._fp8spec_direct_stats["direct"] == 0
    caplog.set_level(logging.INFO, logger="fp8spec.runtime.weight_sync.receiver.direct_sync")
    broken = _patched(tp=None)(model, [weights])  # tp() is not callable: the plan cannot be built
    broken.update_weights_from_ipc()
    assert broken.to_verl == [[n for n, _ in weights]] and broken._fp8spec_direct_stats["broken"]
    assert any(r.levelno == logging.WARNING and "plan not built" in r.getMessage() for r in caplog.records)
    assert all(
        torch.equal(before[n].view(torch.uint8), p.data.view(torch.uint8))
        for n, p in model.named_parameters()
    )


class GraphWrapper:
    """What vLLM 0.24.0's ``CUDAGraphWrapper`` (compilation/cuda_graph.py 145-224) does to attribute reads: an
    instance attribute of the model is forwarded (``__getattr__``), a class attribute of the model is not a class
    attribute of the wrapper, and ``unwrap()`` gives the model back."""

    def __init__(self, runnable):
        self.runnable = runnable

    def __getattr__(self, key):
        if hasattr(self.runnable, key):
            return getattr(self.runnable, key)
        raise AttributeError(key)

    def unwrap(self):
        return self.runnable


@pytest.mark.parametrize("unwraps", [True, False], ids=["get_model", "no-get_model"])
def test_a_model_wrapped_for_cuda_graphs_is_planned_from_the_model_itself(unwraps, caplog):
    """main_ppo on the tiny Qwen3-MoE (V1 runner, full CUDA graphs): the runner's ``model`` is the wrapper, and its
    type has no ``packed_modules_mapping``; read through ``get_model()`` (as vLLM's runner exposes it) every tensor
    is planned, without it q/k/v fall to verl's receiver, which this shows is what the wrapper alone does."""
    cfg = SMALL_MOE
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, torch.bfloat16)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    model = _model(cfg, params, parts, _garbage(params))
    ext = _patched()(model, [weights])
    ext.model_runner.model = GraphWrapper(model)
    if unwraps:
        ext.model_runner.get_model = ext.model_runner.model.unwrap
    ext.update_weights_from_ipc()
    qkv = [n for n, _ in weights if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))]
    assert qkv
    if unwraps:
        assert ext.to_verl == []
        _assert_bytes_equal(ref, {n: p.data for n, p in model.named_parameters()}, list(params))
    else:
        assert ext.to_verl == [qkv]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_routing_through_the_triton_path_equals_the_cpu_reference():
    cfg = SMALL_MOE
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, torch.float32, seed=3)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    model = _model(cfg, params, parts, {n: t.cuda() for n, t in _garbage(params).items()})
    ext = _patched()(model, [[(n, t.cuda()) for n, t in weights]])
    ext.update_weights_from_ipc()
    assert ext.to_verl == [] and ext._fp8spec_direct_stats["copied"] > 0
    _assert_bytes_equal(ref, {n: p.data.cpu() for n, p in model.named_parameters()}, list(params))


class VerlLikeExt(Ext):
    """As verl 0.9.1's update_weights_from_ipc: buckets from a reused buffer, then the post-load processing read
    from verl.utils.vllm.vllm_quant_utils at call time (utils.py 343-345)."""

    def __init__(self, model, buckets):
        super().__init__(model, buckets)
        self.loaded, self.events = [], []

    def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
        for b in self.buckets:
            sent = [(n, t.clone()) for n, t in b]  # the IPC buffer's views for this bucket
            self._update_weights(sent, peft_config=peft_config, base_sync_done=base_sync_done)
            for _, t in sent:
                t.zero_()  # the buffer is refilled with the next bucket
        sys.modules[hook.MOD_QUANT_UTILS].process_quanted_weights_after_loading(self.model_runner.model)

    def _update_weights(self, weights, peft_config, base_sync_done):
        self.events.append("load")
        self.loaded.append([(n, t.clone()) for n, t in weights])


@pytest.mark.parametrize("cfg", [SMALL_DENSE, SMALL_MOE], ids=["dense", "moe"])
def test_uncovered_tensors_reach_verl_in_one_call_before_the_post_load_processing(cfg, monkeypatch, caplog):
    quant_utils = types.ModuleType(hook.MOD_QUANT_UTILS)
    post_calls = []
    quant_utils.process_quanted_weights_after_loading = lambda model: post_calls.append(model)
    monkeypatch.setitem(sys.modules, hook.MOD_QUANT_UTILS, quant_utils)
    original = quant_utils.process_quanted_weights_after_loading
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, torch.bfloat16)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    dst = _garbage(params)
    # loaders that are not plain copies (as a model whose norms transform their weights would have): uncovered
    loaders = dict.fromkeys(engine_loaders(params), "Transforming.weight_loader")
    model = _model(cfg, params, parts, dst, loaders)
    step = -(-len(weights) // 3)
    cls = type("V", (VerlLikeExt,), {})
    hook.patch_worker_extension(
        types.SimpleNamespace(vLLMColocateWorkerExtension=cls),
        factory=lambda: hook.DirectState(tp=lambda: (0, 1)),
    )
    ext = cls(model, [weights[i : i + step] for i in range(0, len(weights), step)])
    caplog.set_level(logging.INFO, logger="fp8spec.runtime.weight_sync.receiver.direct_sync")
    for sync in (1, 2):
        ext.events.clear()
        ext.loaded.clear()
        ext.update_weights_from_ipc(peft_config=None, base_sync_done=True)
        # one load of every uncovered tensor, in stream order, with the values sent (kept copies survive the
        # buffer's refill), and it comes before the post-load processing
        rest = [(n, t) for n, t in weights if not n.endswith("_proj.weight")]
        assert ext.events == ["load"] and len(post_calls) == sync
        assert [n for n, _ in ext.loaded[0]] == [n for n, _ in rest]
        assert all(torch.equal(a, b.to(a.dtype)) for (_, a), (_, b) in zip(ext.loaded[0], rest))
        assert quant_utils.process_quanted_weights_after_loading is original  # put back after the sync
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, {n: p.data for n, p in model.named_parameters()}, fp8)
    assert ext._fp8spec_direct_stats["verl_calls"] == 1
    assert any("through verl's receiver in 1 calls" in r.getMessage() for r in caplog.records)


def test_a_large_uncovered_tensor_is_loaded_at_once_with_what_was_kept(monkeypatch):
    st = hook.DirectState(tp=lambda: (0, 1))
    monkeypatch.setattr(hook, "DEFER_TENSOR_BYTES", 1000)
    small, big = ("norm.weight", torch.ones(8)), ("embed.weight", torch.ones(300))  # 32 B, 1200 B
    assert st.defer([small]) == [] and st.pending_bytes == 32
    now = st.defer([big])
    assert [n for n, _ in now] == ["norm.weight", "embed.weight"] and st.pending == []
    monkeypatch.setattr(hook, "DEFER_TOTAL_BYTES", 40)
    assert st.defer([small]) == []
    assert [n for n, _ in st.defer([small])] == ["norm.weight", "norm.weight"]  # past the total: flushed


class ReceivingExt(Ext):
    """As Ext, with each bucket handed over inside the receiver patch's context (flat_receive.patch_bucket_receiver
    wraps on_bucket_received in ``engine.received_bucket(buffer, meta, weights)``: the same list object)."""

    engine: FlatBucketEngine

    def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
        for b in self.buckets:
            with self.engine.received_bucket(b.buffer, b.meta, b.weights, b.raw):
                self._update_weights(b.weights, peft_config=peft_config, base_sync_done=base_sync_done)


def _receiving_moe(dtype, seed):
    """The small MoE engine behind the direct hook on a ReceivingExt: (params, weights, reference bytes, model,
    the patched extension class, verl's buckets of the weights as its receiver holds them)."""
    from .test_direct_sync import _received

    cfg = SMALL_MOE
    params, parts = engine_params(cfg, 1)
    weights = _weights(cfg, dtype, seed=seed)
    ref = _vllm_style_load(cfg, params, weights, 1, 0)
    model = _model(cfg, params, parts, _garbage(params))
    engine = FlatBucketEngine()
    ext_cls = type("R", (ReceivingExt,), {"engine": engine})
    hook.patch_worker_extension(
        types.SimpleNamespace(vLLMColocateWorkerExtension=ext_cls),
        factory=lambda: hook.DirectState(tp=lambda: (0, 1)),
        engine=engine,
    )
    return params, weights, ref, model, ext_cls, _received(weights, bucket_size=2 << 20)


@pytest.mark.parametrize("old_switch", ["1", "0"])
def test_the_hook_quantizes_in_place_on_the_receivers_buffer(monkeypatch, old_switch):
    # the engine's DirectSync always rounds float32 buckets in the quantizer as it loads and writes into the
    # parameters where it can (it acts on CUDA only: here the copy runs write); the former switches do nothing
    monkeypatch.setenv("FP8SPEC_DIRECT_ROUND_IN_KERNEL", old_switch)
    monkeypatch.setenv("FP8SPEC_DIRECT_INTO_PARAMS", old_switch)
    params, weights, ref, model, ext_cls, buckets = _receiving_moe(torch.float32, 11)
    ext = ext_cls(model, buckets)
    ext.update_weights_from_ipc(peft_config=None, base_sync_done=True)
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, {n: p.data for n, p in model.named_parameters()}, fp8)
    ds = ext._fp8spec_direct.ds
    assert ds.stats["in_place"] == len(buckets) > 1
    assert ds.stats["rounded_in_kernel"] == len(buckets)
    assert ds.into_params is True and ds.stats["into_params"] == 0


def test_the_sync_line_counts_the_views_the_lazy_receiver_built(caplog):
    import pickle

    from fp8spec.runtime.quantization.flat_bucket import ReceivedBucket
    from fp8spec.runtime.weight_sync.receiver.lazy_receive import BucketViews

    params, weights, ref, model, ext_cls, eager = _receiving_moe(torch.bfloat16, 12)
    ext = ext_cls(model, [])
    caplog.set_level(logging.INFO, logger="fp8spec.runtime.weight_sync.receiver.direct_sync")
    for _ in range(2):
        ext.buckets = []
        for b in eager:
            meta = pickle.loads(b.raw)["bucket_meta"]
            views = BucketViews(b.buffer, meta, torch.device("cpu"), False, None)
            ext.buckets.append(ReceivedBucket(b.buffer, meta, views, b.raw))
        ext.update_weights_from_ipc(peft_config=None, base_sync_done=True)
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, {n: p.data for n, p in model.named_parameters()}, fp8)
    lines = [r.getMessage() for r in caplog.records if "views built for" in r.getMessage()]
    assert len(lines) == 2 and f"views built for {len(weights)} of {len(weights)} tensors" in lines[0]
    built = int(lines[1].split("views built for ")[1].split(" of ")[0])
    rest = sum(1 for n, _ in weights if not n.endswith("_proj.weight"))
    assert rest <= built <= rest + 2 * len(eager) < len(weights)  # the second sync reads the covered in place


@pytest.mark.parametrize("engine_dtype", [torch.float16, torch.float32])
def test_a_bucket_cast_to_another_dtype_than_the_engines_is_refused(engine_dtype):
    # FP8SPEC_SEND_CAST_BF16 sends float32 weights as BF16: an engine of another dtype would load them rounded
    # twice, silently; the hook refuses the bucket, and a BF16 engine takes it as any other
    import pickle

    from fp8spec.runtime.quantization.flat_bucket import ReceivedBucket
    from fp8spec.runtime.weight_sync.receiver.lazy_receive import BucketViews

    params, weights, ref, model, ext_cls, eager = _receiving_moe(torch.bfloat16, 12)

    def buckets(cast):
        out = []
        for b in eager:
            meta = pickle.loads(b.raw)["bucket_meta"]
            views = BucketViews(b.buffer, meta, torch.device("cpu"), False, None, cast)
            out.append(ReceivedBucket(b.buffer, meta, views, b.raw))
        return out

    before = {n: p.data.clone() for n, p in model.named_parameters()}
    ext = ext_cls(model, buckets("bfloat16"))
    ext.model_runner.vllm_config.model_config.dtype = engine_dtype
    with pytest.raises(RuntimeError, match=f"cast to bfloat16 .* dtype is {engine_dtype}.*FP8SPEC_SEND_CAST_BF16=0"):
        ext.update_weights_from_ipc(peft_config=None, base_sync_done=True)
    assert all(torch.equal(before[n].view(torch.uint8), p.data.view(torch.uint8)) for n, p in model.named_parameters())
    ok = ext_cls(model, buckets("bfloat16"))  # a BF16 engine takes it
    ok.update_weights_from_ipc(peft_config=None, base_sync_done=True)
    fp8 = [n for n, (_, dt) in params.items() if dt != "bfloat16"]
    _assert_bytes_equal(ref, {n: p.data for n, p in model.named_parameters()}, fp8)
