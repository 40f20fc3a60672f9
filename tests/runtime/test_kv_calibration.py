import pytest
import torch

from tests.conftest import require

transformers = require("transformers")

from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3  # noqa: E402

from fp8spec.runtime.kv_scales import kv_calibration as kc  # noqa: E402


def _tiny_qwen3(impl: str, layers: int = 3) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        rope_theta=10000.0,
    )
    cfg._attn_implementation = impl
    torch.manual_seed(1234)
    model = Qwen3ForCausalLM(cfg).eval()
    # make q/k/v magnitudes differ per layer so a layer mix-up cannot pass
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            layer.self_attn.v_proj.weight.mul_(1.0 + i)
            layer.self_attn.k_norm.weight.mul_(2.0 + i)
    return model


def _direct_amax(model, ids):
    """max|q|, |k|, |v| per layer taken straight from the post-RoPE tensors (independent capture)."""
    rec = {"qk": [], "v": {}}
    orig = modeling_qwen3.apply_rotary_pos_emb

    def spy(q, k, cos, sin, *a, **kw):
        q2, k2 = orig(q, k, cos, sin, *a, **kw)
        rec["qk"].append((q2.detach().abs().amax().double(), k2.detach().abs().amax().double()))
        return q2, k2

    handles = [
        layer.self_attn.v_proj.register_forward_hook(
            lambda m, i, o, idx=idx: rec["v"].__setitem__(idx, o.detach().abs().amax().double())
        )
        for idx, layer in enumerate(model.model.layers)
    ]
    modeling_qwen3.apply_rotary_pos_emb = spy
    try:
        with torch.no_grad():
            out = model(ids)
    finally:
        modeling_qwen3.apply_rotary_pos_emb = orig
        for h in handles:
            h.remove()
    assert len(rec["qk"]) == len(model.model.layers)
    return [(q, k, rec["v"][i]) for i, (q, k) in enumerate(rec["qk"])], out.logits


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_hf_qwen3_scales_equal_post_rope_amax(impl):
    model = _tiny_qwen3(impl)
    ids = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(0))
    want, logits_ref = _direct_amax(model, ids)

    cal = kc.KVScaleCalibrator(model.config.num_hidden_layers, divisors=(200.0, 200.0, 100.0))
    assert cal.attach(model) == 3
    with torch.no_grad():
        logits_idle = model(ids).logits  # not armed: nothing recorded
    assert not cal.has_data()
    with torch.no_grad(), cal.calibrating():
        logits = model(ids).logits
    assert torch.equal(logits, logits_ref) and torch.equal(logits_idle, logits_ref)  # pass-through

    named = dict(cal.named_scales())
    assert len(named) == 9
    for i, (q, k, v) in enumerate(want):
        assert cal.amax[i].tolist() == [float(q), float(k), float(v)]  # exact, no rounding
        assert named[f"model.layers.{i}.self_attn.attn.q_scale"].item() == pytest.approx(float(q) / 200, rel=1e-6)
        assert named[f"model.layers.{i}.self_attn.attn.k_scale"].item() == pytest.approx(float(k) / 200, rel=1e-6)
        assert named[f"model.layers.{i}.self_attn.attn.v_scale"].item() == pytest.approx(float(v) / 100, rel=1e-6)
    # layers really differ, so the per-layer check above has teeth
    assert len({round(float(w[2]), 6) for w in want}) == 3

    # running max over several passes, reset clears it
    ids2 = torch.randint(0, 256, (1, 17), generator=torch.Generator().manual_seed(1))
    want2, _ = _direct_amax(model, ids2)
    with torch.no_grad(), cal.calibrating():
        model(ids2)
    for i in range(3):
        exp = [max(float(a), float(b)) for a, b in zip(want[i], want2[i])]
        assert cal.amax[i].tolist() == exp
    cal.reset()
    assert cal.named_scales() == []
    cal.detach()
    with torch.no_grad(), cal.calibrating():
        model(ids)
    assert cal.named_scales() == []  # detached: no more observations


def test_fp8_max_divisors_and_fresh_pass():
    model = _tiny_qwen3("sdpa", layers=2)
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(3))
    want, _ = _direct_amax(model, ids)
    cal = kc.KVScaleCalibrator(2, divisors="fp8_max")
    cal.attach(model)
    cal.calibrate_with(model, [{"input_ids": ids}])
    s = cal.scales()
    for i in range(2):
        assert s[i].tolist() == pytest.approx([float(x) / 448 for x in want[i]], rel=1e-6)
    cal.detach()


class _FakeCoreAttention(torch.nn.Module):
    """Signature of Megatron's DotProductAttention.forward(query, key, value, attention_mask, ...)."""

    def __init__(self, layer_number):
        super().__init__()
        self.layer_number = layer_number

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, packed_seq_params=None):
        return query.sum() + key.sum() + value.sum()


class _FakeMegatronLayer(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.self_attention = torch.nn.Module()
        self.self_attention.core_attention = _FakeCoreAttention(n)


def test_megatron_core_attention_pre_hook():
    model = torch.nn.Module()
    model.decoder = torch.nn.Module()
    # a pipeline stage holding global layers 3 and 4 (1-based layer_number 4, 5)
    model.decoder.layers = torch.nn.ModuleList([_FakeMegatronLayer(4), _FakeMegatronLayer(5)])
    cal = kc.KVScaleCalibrator(6, divisors=(1.0, 1.0, 1.0))
    assert cal.attach(model) == 2
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(7, 2, 4, 8, generator=g) * s for s in (3.0, 5.0, 7.0))
    with cal.calibrating():
        model.decoder.layers[0].self_attention.core_attention(q, k, v, None)
        model.decoder.layers[1].self_attention.core_attention(query=q * 2, key=k * 2, value=v * 2, attention_mask=None)
    assert cal.amax[3].tolist() == [q.abs().max().item(), k.abs().max().item(), v.abs().max().item()]
    assert cal.amax[4].tolist() == [2 * q.abs().max().item(), 2 * k.abs().max().item(), 2 * v.abs().max().item()]
    assert [n for n, _ in cal.named_scales()] == [
        f"model.layers.{i}.self_attn.attn.{c}_scale" for i in (3, 4) for c in "qkv"
    ]
    cal.detach()
    assert not model.decoder.layers[0].self_attention.core_attention._forward_pre_hooks


def test_names_and_errors():
    assert kc.is_kv_scale_name("model.layers.0.self_attn.attn.k_scale")
    assert not kc.is_kv_scale_name("model.layers.0.self_attn.k_proj.weight_scale_inv")
    assert kc.split_kv_scale_name("model.layers.12.self_attn.attn.v_scale") == ("model.layers.12.self_attn.attn", "v")
    with pytest.raises(ValueError):
        kc.split_kv_scale_name("model.layers.0.mlp.weight")
    with pytest.raises(ValueError):
        kc.KVScaleCalibrator(2, divisors=(1.0, 0.0, 1.0))
    cal = kc.KVScaleCalibrator(2)
    with pytest.raises(IndexError):
        cal.observe(2, torch.ones(1), torch.ones(1), torch.ones(1))
    cal.reduce()  # no process group: no-op
    assert cal.named_scales() == []


def _observed(cal, value):
    t = torch.full((2, 4), value)
    for layer in range(cal.num_layers):
        cal.observe(layer, t, t, t)


def test_sync_scales_per_step_follow_each_step(monkeypatch):
    from fp8spec.runtime.kv_scales import kv_hooks

    monkeypatch.delenv("FP8SPEC_KV_RECALIBRATE", raising=False)
    cal = kc.KVScaleCalibrator(2, divisors=(1.0, 1.0, 1.0))
    _observed(cal, 2.0)
    first = kv_hooks.scales_for_sync(cal)
    _observed(cal, 5.0)
    second = kv_hooks.scales_for_sync(cal)
    assert [float(t) for _, t in first] == [2.0] * 6
    assert [float(t) for _, t in second] == [5.0] * 6


def test_sync_scales_once_keep_the_first_real_calibration(monkeypatch):
    from fp8spec.runtime.kv_scales import kv_hooks

    monkeypatch.setenv("FP8SPEC_KV_RECALIBRATE", "once")
    cal = kc.KVScaleCalibrator(2, divisors=(1.0, 1.0, 1.0))
    assert kv_hooks.scales_for_sync(cal) == []  # nothing observed yet (first rollout): nothing frozen
    _observed(cal, 2.0)
    first = kv_hooks.scales_for_sync(cal)
    _observed(cal, 5.0)
    later = kv_hooks.scales_for_sync(cal)
    assert [n for n, _ in later] == [n for n, _ in first]
    assert [float(t) for _, t in later] == [2.0] * 6


def test_sync_scales_recalibrate_env_is_checked(monkeypatch):
    from fp8spec.runtime.kv_scales import kv_hooks

    monkeypatch.setenv("FP8SPEC_KV_RECALIBRATE", "sometimes")
    cal = kc.KVScaleCalibrator(1, divisors=(1.0, 1.0, 1.0))
    _observed(cal, 1.0)
    with pytest.raises(ValueError, match="per_step or once"):
        kv_hooks.scales_for_sync(cal)
