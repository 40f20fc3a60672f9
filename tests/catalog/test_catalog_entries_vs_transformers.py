"""Every catalog entry, at full size, against transformers' own modeling code.

Each entry's config.json is turned into transformers' config class and the class its ``architectures`` names is
built on torch's meta device (no memory, no weights, no network). transformers' own save path
(``revert_weight_conversion``, what ``save_pretrained`` applies) maps the live parameter names back to checkpoint
keys; those keys must be exactly ``module_names()``, every listed linear must have that weight's shape and bias,
the parameter count must match, and the QK-norm, sliding-window and router facts must agree with the model.
"""

from __future__ import annotations

import pytest

from fp8spec.catalog import catalog_ids, get_model
from fp8spec.catalog._arch import GEMMA3_TEXT_DEFAULTS, SIGLIP_VISION_DEFAULTS
from fp8spec.catalog._store import load_entry
from tests.conftest import require

torch = require("torch")
transformers = require("transformers")
core = require("transformers.core_model_loading", reason="transformers >= 5 conversion mapping")
mapping = require("transformers.conversion_mapping")

# transformers' SigLIP conversion strips the released "vision_model." prefix on load (a PrefixChange), and
# revert_weight_conversion drops PrefixChange transforms for a model not built by from_pretrained (its own
# comment: it cannot know the prefix was there). The released Gemma 3 checkpoints keep it; vLLM 0.24.0 names the
# modules vision_tower.vision_model.* (siglip.py SiglipVisionModel.vision_model). Put it back, after checking that
# transformers still declares that rename.
_VISION = "vision_tower."
_VISION_MODEL = "vision_tower.vision_model."


def _siglip_prefix_change_declared() -> bool:
    convs = mapping.get_checkpoint_conversion_mapping("CLIPVisionModel") or []
    return any(getattr(c, "prefix_to_remove", None) == "vision_model" for c in convs)


def _checkpoint_shapes(facts, entry_cfg: dict) -> tuple[dict[str, tuple[int, ...]], object]:
    cfg = dict(entry_cfg)
    config = transformers.CONFIG_MAPPING[cfg["model_type"]].from_dict(cfg)
    cls = getattr(transformers, facts.architecture)
    with torch.device("meta"):
        model = cls(config)
    state = core.revert_weight_conversion(model, model.state_dict())
    shapes: dict[str, tuple[int, ...]] = {}
    for key, tensor in state.items():
        if key.startswith(_VISION) and not key.startswith(_VISION_MODEL):
            assert _siglip_prefix_change_declared()
            key = _VISION_MODEL + key[len(_VISION) :]
        shapes[key] = tuple(tensor.shape)
    return shapes, config


@pytest.mark.parametrize("model_id", catalog_ids())
def test_entry_matches_transformers(model_id):
    facts = get_model(model_id)
    shapes, config = _checkpoint_shapes(facts, load_entry(model_id)["config"])

    owners = {k.rsplit(".", 1)[0] for k in shapes}
    names = set(facts.module_names())
    assert names == owners, (sorted(names - owners)[:5], sorted(owners - names)[:5])

    linears = facts.linear_modules() + facts.vision_linear_modules()
    for m in linears:
        if m.tied:
            continue
        assert shapes[m.name + ".weight"] == (m.out_features, m.in_features), m.name
        assert (m.name + ".bias" in shapes) == m.bias, m.name
    # every 2-D weight outside embeddings and norms is a listed linear (or the Gemma 3 projector)
    groups = facts.symbolic_groups()
    listed = {m.name for m in linears}
    loose = {
        k[: -len(".weight")]
        for k, s in shapes.items()
        if k.endswith(".weight") and len(s) == 2 and k[: -len(".weight")] not in groups["embeddings"]
    }
    assert loose <= listed

    tied_key = facts.lm_head_name + ".weight"
    assert facts.num_parameters() == sum(
        torch.Size(s).numel() for k, s in shapes.items() if not (facts.tie_word_embeddings and k == tied_key)
    )
    for norm in groups["norms"]:
        assert len(shapes[norm + ".weight"]) == 1, norm
    for router in groups["router"]:
        assert router.endswith(".gate") and shapes[router + ".weight"] == (
            facts.num_experts,
            facts.hidden_size,
        )

    # facts a rule reads, derived from the model itself
    assert facts.qk_norm == any(k.endswith("self_attn.k_norm.weight") for k in shapes)
    text = config.get_text_config()
    if facts.attention == "gqa" and getattr(text, "head_dim", None) is not None:
        assert facts.head_dim == text.head_dim  # also implied by the q/k/v shapes above
    types = getattr(text, "layer_types", None) or []
    assert facts.sliding_layers == tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if facts.sliding_layers:
        assert facts.sliding_window == text.sliding_window
    assert facts.tie_word_embeddings == bool(getattr(text, "tie_word_embeddings", False))


def test_the_catalog_covers_the_field():
    """The models RL users train: every one has an entry."""
    want = {
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-1.7B",
        "Qwen/Qwen3-4B",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-14B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-235B-A22B",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Llama-3.3-70B-Instruct",
        "mistralai/Mixtral-8x7B-v0.1",
        "mistralai/Mixtral-8x22B-v0.1",
        "google/gemma-3-4b-it",
        "google/gemma-3-12b-it",
        "google/gemma-3-27b-it",
        "zai-org/GLM-4.5-Air",
        "deepseek-ai/DeepSeek-V2-Lite",
    }
    assert want <= set(catalog_ids())


@pytest.mark.parametrize(
    ("ours", "cls"),
    [(GEMMA3_TEXT_DEFAULTS, "Gemma3TextConfig"), (SIGLIP_VISION_DEFAULTS, "SiglipVisionConfig")],
)
def test_defaults_are_transformers_defaults(ours, cls):
    """The defaults a sparse config.json relies on are the config class's own."""
    theirs = getattr(transformers, cls)()
    for key, value in ours.items():
        if key == "sliding_window_pattern":
            got = theirs._sliding_window_pattern
        elif key == "vision_use_head":  # modeling_siglip.py: True unless the config has the key
            got = getattr(theirs, key, True)
        else:
            got = getattr(theirs, key)
        assert got == value, key
