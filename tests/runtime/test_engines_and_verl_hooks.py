"""Engine-side and verl-side patches exercised on stand-ins with the real attribute layouts.

vLLM, SGLang and verl's Ray-based workers cannot be installed/imported here; the stand-ins copy the
attribute names the patches rely on (cited in the patch modules) so the logic is tested, not the
engines.
"""

import asyncio
import logging
import types

import pytest
import torch

from fp8spec.runtime import verl_patch
from fp8spec.runtime.kv_scales import sglang_kv, vllm_kv
from fp8spec.runtime.quantization import blockquant as bq
from fp8spec.runtime.quantization import verl_quant
from fp8spec.runtime.settings import QuantSettings
from tests.conftest import require

# ----------------------------------------------------------------------------------------- vLLM


class FakeVllmAttention(torch.nn.Module):
    """Scale state of vLLM's Attention after set_default_quant_scales (0.33 layout)."""

    def __init__(self):
        super().__init__()
        for k in ("q", "k", "v", "prob"):
            self.register_buffer(f"_{k}_scale", torch.tensor(1.0))
            setattr(self, f"_{k}_scale_float", 1.0)
        self._k_scale_cpu = torch.tensor(1.0)
        self._v_scale_cpu = torch.tensor(1.0)


def _fake_vllm_model(n=2):
    m = torch.nn.Module()
    m.model = torch.nn.Module()
    m.model.layers = torch.nn.ModuleList()
    for _ in range(n):
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        layer.self_attn.attn = FakeVllmAttention()
        m.model.layers.append(layer)
    return m


def test_vllm_apply_kv_scales_in_place():
    model = _fake_vllm_model()
    buf = model.model.layers[1].self_attn.attn._k_scale
    ptr = buf.data_ptr()
    named = [
        ("model.layers.1.self_attn.attn.q_scale", torch.tensor(0.5)),
        ("model.layers.1.self_attn.attn.k_scale", torch.tensor(0.25)),
        ("model.layers.1.self_attn.attn.v_scale", 0.125),
    ]
    assert vllm_kv.apply_kv_scales(model, named, fnuz_factor=1.0) == 1
    a = model.model.layers[1].self_attn.attn
    assert (a._q_scale.item(), a._k_scale.item(), a._v_scale.item()) == (0.5, 0.25, 0.125)
    assert (a._q_scale_float, a._k_scale_float, a._v_scale_float) == (0.5, 0.25, 0.125)
    assert a._k_scale_cpu.item() == 0.25 and a._v_scale_cpu.item() == 0.125
    assert a._k_scale.data_ptr() == ptr  # same storage: CUDA graphs keep reading it
    assert model.model.layers[0].self_attn.attn._k_scale.item() == 1.0
    assert vllm_kv.apply_kv_scales(model, named[:1], fnuz_factor=2.0) == 1
    assert a._q_scale.item() == 1.0
    with pytest.raises(KeyError):
        vllm_kv.apply_kv_scales(model, [("model.layers.7.self_attn.attn.k_scale", 1.0)], fnuz_factor=1.0)
    with pytest.raises(ValueError):
        vllm_kv.apply_kv_scales(model, [("model.layers.0.self_attn.attn.k_scale", 0.0)], fnuz_factor=1.0)


class FakeV1ModelRunner:
    """vLLM 0.24 V1 GPUModelRunner's wake-up path: ``post_kv_cache_wake_up`` -> ``init_fp8_kv_scales``,
    which fills ``_k_scale`` / ``_v_scale`` with 1.0 (gpu_model_runner.py 935-980)."""

    def __init__(self, model):
        self.model = model

    def post_kv_cache_wake_up(self):
        for mod in self.model.modules():
            if isinstance(mod, FakeVllmAttention):
                mod._k_scale.fill_(1.0)
                mod._v_scale.fill_(1.0)


def _fake_verl_vllm_ext_module():
    class vLLMColocateWorkerExtension:  # noqa: N801 - verl's name
        def __init__(self, model):
            self.model = model
            self.model_runner = FakeV1ModelRunner(model)
            self.loaded = []

        def _iter_all_models(self):
            yield self.model

        def _update_weights(self, weights, peft_config=None, base_sync_done=False):
            self.loaded.extend(n for n, _ in weights)

        def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, use_shm=False):
            for bucket in self.buckets:
                self._update_weights(bucket, peft_config=peft_config, base_sync_done=base_sync_done)
            # like verl's non-quantized post-processing: Attention resets its scales to 1.0
            for mod in self.model.modules():
                if isinstance(mod, FakeVllmAttention):
                    mod._k_scale.fill_(1.0)
                    mod._k_scale_float = 1.0

    return types.SimpleNamespace(vLLMColocateWorkerExtension=vLLMColocateWorkerExtension)


def test_verl_vllm_worker_extension_patch(monkeypatch):
    monkeypatch.setattr(vllm_kv, "_fnuz_factor", lambda: 1.0)
    mod = _fake_verl_vllm_ext_module()
    vllm_kv.patch_verl_worker_extension(mod)
    vllm_kv.patch_verl_worker_extension(mod)  # idempotent
    ext = mod.vLLMColocateWorkerExtension(_fake_vllm_model())
    ext.buckets = [
        [("model.layers.0.self_attn.q_proj.weight", torch.zeros(2, 2))],
        [
            ("model.layers.0.mlp.down_proj.weight", torch.zeros(2, 2)),
            ("model.layers.0.self_attn.attn.k_scale", torch.tensor(0.75)),
            ("model.layers.1.self_attn.attn.k_scale", torch.tensor(0.5)),
        ],
    ]
    ext.update_weights_from_ipc()
    assert ext.loaded == ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight"]
    assert ext.model.model.layers[0].self_attn.attn._k_scale.item() == 0.75  # applied after the reset
    assert ext.model.model.layers[1].self_attn.attn._k_scale_float == 0.5
    # verl wakes the KV cache after the update; the V1 runner's reset must not drop the pushed scales
    ext.model_runner.post_kv_cache_wake_up()
    assert ext.model.model.layers[0].self_attn.attn._k_scale.item() == 0.75
    assert ext.model.model.layers[1].self_attn.attn._k_scale.item() == 0.5
    # a sync without scales keeps the last pushed ones across later wake-ups
    ext.buckets = [[("model.layers.0.self_attn.q_proj.weight", torch.zeros(2, 2))]]
    ext.update_weights_from_ipc()
    ext.model_runner.post_kv_cache_wake_up()
    assert ext.model.model.layers[0].self_attn.attn._k_scale.item() == 0.75


def test_v1_runner_reset_without_the_keeper_drops_scales():
    # the bug the keeper fixes, on the stand-in: a plain write is undone by the wake-up
    model = _fake_vllm_model(1)
    runner = FakeV1ModelRunner(model)
    vllm_kv.apply_kv_scales(model, [("model.layers.0.self_attn.attn.k_scale", 0.5)], fnuz_factor=1.0)
    runner.post_kv_cache_wake_up()
    assert model.model.layers[0].self_attn.attn._k_scale.item() == 1.0


def test_keeper_on_a_runner_without_a_wake_up_hook(monkeypatch):
    # vLLM 0.33's runners have no post_kv_cache_wake_up (and reset nothing): the write alone must work
    monkeypatch.setattr(vllm_kv, "_fnuz_factor", lambda: 1.0)
    runner = types.SimpleNamespace(model=_fake_vllm_model(1))
    assert vllm_kv.apply_and_keep(runner, [("model.layers.0.self_attn.attn.k_scale", 0.5)]) == 1
    assert runner.model.model.layers[0].self_attn.attn._k_scale.item() == 0.5
    assert not hasattr(runner, "post_kv_cache_wake_up")


def test_plain_vllm_worker_extension_method(monkeypatch):
    monkeypatch.setattr(vllm_kv, "_fnuz_factor", lambda: 1.0)
    ext = vllm_kv.Fp8specKVScaleWorkerExtension()
    ext.model_runner = FakeV1ModelRunner(_fake_vllm_model(1))
    assert ext.fp8spec_set_kv_scales([("model.layers.0.self_attn.attn.v_scale", 0.3)]) == 1
    assert ext.model_runner.model.model.layers[0].self_attn.attn._v_scale.item() == pytest.approx(0.3)
    ext.model_runner.post_kv_cache_wake_up()
    assert ext.model_runner.model.model.layers[0].self_attn.attn._v_scale.item() == pytest.approx(0.3)
    ext.fp8spec_set_kv_scales([("model.layers.0.self_attn.attn.v_scale", 0.2)])  # wrapped once, value updated
    ext.model_runner.post_kv_cache_wake_up()
    assert ext.model_runner.model.model.layers[0].self_attn.attn._v_scale.item() == pytest.approx(0.2)


# --------------------------------------------------------------------------------------- SGLang


class FakeRadixAttention(torch.nn.Module):
    def __init__(self, quantized=True):
        super().__init__()
        self.k_scale = torch.nn.Parameter(torch.tensor(1.0), requires_grad=False) if quantized else None
        self.v_scale = torch.nn.Parameter(torch.tensor(1.0), requires_grad=False) if quantized else None
        self.k_scale_float = 1.0 if quantized else None
        self.v_scale_float = 1.0 if quantized else None


def test_sglang_custom_loader(monkeypatch):
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.layers = torch.nn.ModuleList([torch.nn.Module(), torch.nn.Module()])
    model.model.layers[0].self_attn = torch.nn.Module()
    model.model.layers[0].self_attn.attn = FakeRadixAttention()
    model.model.layers[1].self_attn = torch.nn.Module()
    model.model.layers[1].self_attn.attn = FakeRadixAttention(quantized=False)
    named = [
        ("model.layers.0.self_attn.attn.q_scale", torch.tensor(9.0)),  # ignored by SGLang MHA
        ("model.layers.0.self_attn.attn.k_scale", torch.tensor(0.5)),
        ("model.layers.0.self_attn.attn.v_scale", torch.tensor(0.25)),
        ("model.layers.1.self_attn.attn.k_scale", torch.tensor(0.125)),
    ]
    assert sglang_kv.apply_kv_scales(model, named, fnuz_factor=1.0) == 2
    a = model.model.layers[0].self_attn.attn
    assert (a.k_scale.item(), a.v_scale.item(), a.k_scale_float, a.v_scale_float) == (0.5, 0.25, 0.5, 0.25)
    assert model.model.layers[1].self_attn.attn.k_scale is None
    assert model.model.layers[1].self_attn.attn.k_scale_float == 0.125
    with pytest.raises(KeyError):
        sglang_kv.apply_kv_scales(model, [("model.layers.5.self_attn.attn.k_scale", 1.0)], fnuz_factor=1.0)
    # the loader entry point refuses to run without a known SGLang
    monkeypatch.setattr(sglang_kv, "_checked", False)
    from fp8spec.runtime import version_guard

    with pytest.raises(version_guard.UnsupportedVersionError):
        sglang_kv.load_kv_scales(model, named)


# ------------------------------------------------------------------------- verl quantizer hooks


def _fake_vllm_quant_utils():
    calls = {"orig": 0}

    def orig_quant_weights(weights, model, quant_config, dtype=torch.bfloat16):
        calls["orig"] += 1
        yield from weights

    state = types.SimpleNamespace(seen_params=set(), fp8_param_names=set())
    return types.SimpleNamespace(
        quant_weights=orig_quant_weights,
        is_deepseek_v4_model=lambda m: getattr(m, "dsv4", False),
        is_vllm_ascend_mx_quant=lambda qc: False,
        fp8_state=state,
        _classify_quant_weight=lambda name, model, asc: "fp8" if name.endswith("proj.weight") else None,
        calls=calls,
    )


@pytest.mark.parametrize("fmt_patch", [{"fast_block_quant"}, {"fast_block_quant", "ue8m0_scales"}, {"ue8m0_scales"}])
def test_vllm_quant_weights_replacement(fmt_patch, monkeypatch):
    monkeypatch.setenv("FP8SPEC_QUANT_CHUNK_MB", "1")  # force several launches
    mod = _fake_vllm_quant_utils()
    settings = QuantSettings.from_env(fmt_patch)
    verl_quant.patch_vllm_quant(mod, settings)
    g = torch.Generator().manual_seed(0)
    ws = [
        ("model.embed_tokens.weight", torch.randn(300, 64, generator=g).bfloat16()),
        ("model.layers.0.self_attn.q_proj.weight", torch.randn(640, 512, generator=g).bfloat16()),
        ("model.layers.0.input_layernorm.weight", torch.randn(64, generator=g).bfloat16()),
        ("model.layers.0.mlp.down_proj.weight", torch.randn(513, 700, generator=g).bfloat16()),
        ("model.layers.0.mlp.experts.gate_up_proj.weight", torch.randn(4, 256, 128, generator=g).bfloat16()),
    ]
    qc = types.SimpleNamespace(weight_block_size=[128, 128])
    out = list(mod.quant_weights(ws, object(), qc, dtype=torch.bfloat16))
    names = [n for n, _ in out]
    assert names == [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.weight_scale_inv",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.mlp.down_proj.weight_scale_inv",
        "model.layers.0.mlp.experts.gate_up_proj.weight",
        "model.layers.0.mlp.experts.gate_up_proj.weight_scale_inv",
    ]
    d = dict(out)
    fmt = settings.scale_fmt
    for k, v in ws:
        if k.endswith("proj.weight"):
            rq, rs = bq.quantize_blockwise(v, (128, 128), fmt)
            assert torch.equal(d[k].view(torch.uint8), rq.view(torch.uint8))
            assert torch.equal(d[bq.scale_name(k)], rs)
        else:
            assert d[k] is v
    assert mod.calls["orig"] == 0
    # DeepSeek-V4 models keep verl's own path
    list(mod.quant_weights(ws, types.SimpleNamespace(dsv4=True), qc))
    assert mod.calls["orig"] == 1


def test_sglang_quant_weights_by_name_replacement(monkeypatch, caplog):
    monkeypatch.setenv("FP8SPEC_QUANT_CHUNK_MB", "1")

    class FP8QuantizerHelper:
        def __init__(self, quant_config):
            self.quant_config = quant_config

        def should_quantize_param(self, name):
            return name.endswith("proj.weight")

        async def quant_weights_by_name(self, weights, dtype=torch.bfloat16):
            raise AssertionError("original must not run")

    async def ensure_async_iterator(it):
        for x in it:
            yield x

    mod = types.SimpleNamespace(FP8QuantizerHelper=FP8QuantizerHelper, ensure_async_iterator=ensure_async_iterator)
    verl_quant.patch_fp8_utils(mod, QuantSettings.from_env({"fast_block_quant"}))
    g = torch.Generator().manual_seed(1)
    ws = [(f"model.layers.{i}.mlp.up_proj.weight", torch.randn(640, 600, generator=g).bfloat16()) for i in range(3)]
    ws.insert(1, ("model.norm.weight", torch.randn(600, generator=g).bfloat16()))

    async def collect():
        h = FP8QuantizerHelper({"weight_block_size": [128, 128]})
        return [x async for x in h.quant_weights_by_name(ws)]

    with caplog.at_level(logging.INFO, logger=verl_quant.__name__):
        out = asyncio.run(collect())
    # one line per sync, the in-loop evidence on SGLang (the quantizer runs in the trainer's processes)
    lines = [r.getMessage() for r in caplog.records if "fast_block_quant (trainer)" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("fp8spec fast_block_quant (trainer): 3 tensors quantized in ")
    assert "1 passed through" in lines[0]
    assert [n for n, _ in out][:4] == [
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.up_proj.weight_scale_inv",
        "model.norm.weight",
        "model.layers.1.mlp.up_proj.weight",
    ]
    d = dict(out)
    for k, v in ws:
        if k.endswith("proj.weight"):
            rq, rs = bq.quantize_blockwise(v)
            assert torch.equal(d[k].view(torch.uint8), rq.view(torch.uint8)) and torch.equal(d[k + "_scale_inv"], rs)


def test_quant_settings_env(monkeypatch):
    assert QuantSettings.from_env({"fast_block_quant"}).scale_fmt == "fp32"
    assert QuantSettings.from_env({"fast_block_quant"}).backend == "auto"
    assert QuantSettings.from_env({"ue8m0_scales"}).backend == "reference"
    monkeypatch.setenv("FP8SPEC_UE8M0_RULE", "ue8m0_fixed")
    assert QuantSettings.from_env({"ue8m0_scales"}).scale_fmt == "ue8m0_fixed"
    monkeypatch.setenv("FP8SPEC_UE8M0_RULE", "e8m0")
    with pytest.raises(ValueError):
        QuantSettings.from_env({"ue8m0_scales"})


# ----------------------------------------------------------------------- verl trainer kv_scales


def test_verl_trainer_kv_flow(monkeypatch):
    """init_model wrap -> armed forwards -> scales appended after the weights, then reset."""
    transformers = require("transformers")
    cfg = transformers.Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (1, 12))

    class Engine:
        module = hf

        def get_per_tensor_param(self, layered_summon=False, base_sync_done=False):
            return ((n, p.detach()) for n, p in hf.named_parameters()), None

    class TrainingWorker:
        def __init__(self):
            self.engine = Engine()

        def infer_batch(self, data):
            with torch.no_grad():
                return hf(data).logits

        def train_mini_batch(self, data):
            return hf(data).logits.sum()

    def _register(fn):
        fn.attrs_3141562937 = {"dispatch_mode": "ONE_TO_ALL"}  # verl's MAGIC_ATTR
        return fn

    class ActorRolloutRefWorker:
        def __init__(self):
            self.config = types.SimpleNamespace(rollout={"name": "vllm"})

        @_register
        def init_model(self):
            self.actor = TrainingWorker()

    mod = types.SimpleNamespace(ActorRolloutRefWorker=ActorRolloutRefWorker)
    monkeypatch.setenv("FP8SPEC_KV_SCALE_DIVISORS", "fp8_max")
    verl_patch.patch_engine_workers(mod)
    assert ActorRolloutRefWorker.init_model.attrs_3141562937 == {"dispatch_mode": "ONE_TO_ALL"}
    w = ActorRolloutRefWorker()
    w.init_model()
    cal = w._fp8spec_kv_calibrator

    gen, peft = w.actor.engine.get_per_tensor_param()
    names = [n for n, _ in gen]
    assert peft is None and not any(n.endswith("_scale") for n in names)  # nothing observed yet

    w.actor.infer_batch(ids)  # old-log-prob pass: armed
    assert cal.has_data() and cal.observed_calls == 2
    hf(ids)  # a forward outside the armed phases is not observed
    assert cal.observed_calls == 2
    out = list(w.actor.engine.get_per_tensor_param()[0])
    tail = out[-6:]
    assert [n for n, _ in tail] == [f"model.layers.{i}.self_attn.attn.{c}_scale" for i in (0, 1) for c in "qkv"]
    assert all(t.dtype == torch.float32 and t.dim() == 0 and t.item() > 0 for _, t in tail)
    assert len(out) == len(names) + 6
    assert not cal.amax.any()  # reset after the sync


def test_scale_summary_names_each_kind_range():
    named = [("model.layers.0.self_attn.attn.q_scale", 0.5), ("model.layers.1.self_attn.attn.q_scale", 0.25),
             ("model.layers.0.self_attn.attn.k_scale", torch.tensor(0.125)),
             ("model.layers.0.self_attn.attn.v_scale", 2.0)]
    assert vllm_kv.scale_summary(named) == "k [0.125, 0.125] q [0.25, 0.5] v [2, 2]"


# ------------------------------------------------------------------------------ what both engines' writers share


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_bad_name_writes_no_scale_at_all(engine):
    """Both writers find every named attention layer first (kv_calibration.scales_per_layer): a push naming a
    module that is missing, or is not the engine's attention layer, raises before any layer changes."""
    if engine == "vllm":
        model, write, before = _fake_vllm_model(), vllm_kv.apply_kv_scales, lambda a: a._k_scale.item()
    else:
        model = _fake_vllm_model()
        for layer in model.model.layers:
            layer.self_attn.attn = FakeRadixAttention()
        write, before = sglang_kv.apply_kv_scales, lambda a: a.k_scale.item()
    model.model.layers[1].self_attn.mlp = torch.nn.Linear(2, 2)
    first = model.model.layers[0].self_attn.attn
    for bad, message in (("model.layers.9.self_attn.attn", "no attention module"),
                         ("model.layers.1.self_attn.mlp", "is not a")):
        with pytest.raises(KeyError, match=message):
            write(model, [("model.layers.0.self_attn.attn.k_scale", 0.5), (f"{bad}.k_scale", 0.5)], fnuz_factor=1.0)
        assert before(first) == 1.0
