"""fp8spec refuses a Megatron layout iff megatron-core refuses it: the layout rules (PAR001, PAR008-PAR011)
against the real megatron-core 0.16.1 on CPU, for every example bundle and a table of layouts.

What runs for real: ``megatron.core.parallel_state.initialize_model_parallel`` (the world / tp*cp*pp /
etp*ep*pp arithmetic and its rank generators), ``TransformerConfig.__post_init__`` (heads and query groups vs
tp, expert parallelism without experts, uneven pipeline stages), ``get_num_layers_to_build`` for every
pipeline rank (num_layers vs pp), and ``BaseMoELayer.__init__`` (experts vs ep).

What is faked, and why: a layout's world has up to 40 ranks, this process is one. The default process group
is real (gloo, world size 1, a file store: no network), so ``is_initialized`` and ``get_rank`` are real;
``get_world_size`` reports the layout's world, and ``new_group`` returns a ``FakeGroup`` that knows its ranks,
because a group over ranks that do not exist cannot be created in a one-process world. Megatron's own
arithmetic, rank generators and assertions are unchanged.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.compiler.golden import cases, compile_files
from tests.conftest import BASE_SPEC, patched, require, skip_missing_extra

if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    skip_missing_extra("megatron-core is not installed (pip install --no-deps megatron-core==0.16.1)", allow_module_level=True)
require("hydra")

LAYOUT_RULES = {"PAR001", "PAR008", "PAR009", "PAR010", "PAR011"}
# megatron-core's failing stage -> the fp8spec rule that mirrors it
STAGE_RULE = {"initialize_model_parallel": "PAR001", "heads": "PAR011", "experts": "PAR010",
              "TransformerConfig": "PAR008", "layers": "PAR008", "moe": "PAR009"}


class FakeGroup:
    """A process group over ranks that do not exist in this one-process world (size and rank only)."""

    def __init__(self, ranks):
        self.ranks = list(ranks)

    def size(self) -> int:
        return len(self.ranks)

    def rank(self) -> int:
        return self.ranks.index(0) if 0 in self.ranks else -1


@pytest.fixture(scope="module")
def one_process_world(tmp_path_factory):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    store = tmp_path_factory.mktemp("dist") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model_kwargs(model, layout: dict) -> dict:
    import torch

    kw = {"num_layers": model.num_hidden_layers, "hidden_size": model.hidden_size,
          "num_attention_heads": model.num_attention_heads, "num_query_groups": model.num_key_value_heads,
          "kv_channels": model.head_dim, "ffn_hidden_size": model.intermediate_size,
          "bf16": True, "params_dtype": torch.bfloat16,
          "tensor_model_parallel_size": layout["tp"], "pipeline_model_parallel_size": layout["pp"],
          "context_parallel_size": layout["cp"], "expert_model_parallel_size": layout["ep"],
          "expert_tensor_parallel_size": layout["etp"],
          # what verl hands Megatron: sequence parallel with TP (McoreEngineConfig), pipeline_dtype with PP
          "sequence_parallel": layout["tp"] > 1}
    if layout["pp"] > 1:
        kw["pipeline_dtype"] = torch.bfloat16
    if layout.get("first") is not None:
        kw["num_layers_in_first_pipeline_stage"] = layout["first"]
    if layout.get("last") is not None:
        kw["num_layers_in_last_pipeline_stage"] = layout["last"]
    if model.is_moe:
        kw.update(num_moe_experts=model.num_experts, moe_router_topk=model.num_experts_per_tok,
                  moe_ffn_hidden_size=model.moe_intermediate_size)
    return kw


def megatron_refusal(model, layout: dict, monkeypatch) -> tuple[str, str]:
    """(stage, message) of megatron-core's first refusal of ``layout`` for ``model``; ("", "") if it starts."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.moe_layer import BaseMoELayer
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    real_world_size = dist.get_world_size
    monkeypatch.setattr(dist, "get_world_size",
                        lambda group=None: layout["world"] if group is None else real_world_size(group))
    monkeypatch.setattr(dist, "new_group", lambda ranks=None, **kwargs: FakeGroup(ranks))
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=layout["tp"], pipeline_model_parallel_size=layout["pp"],
            context_parallel_size=layout["cp"], expert_model_parallel_size=layout["ep"],
            expert_tensor_parallel_size=layout["etp"], create_gloo_process_groups=True)
    except (RuntimeError, AssertionError) as err:
        ps.destroy_model_parallel()
        return "initialize_model_parallel", str(err)
    try:
        try:
            config = TransformerConfig(**_model_kwargs(model, layout))
        except ValueError as err:
            text = str(err)
            stage = ("heads" if "num_attention_heads" in text or "num_query_groups" in text
                     else "experts" if "num_moe_experts" in text else "TransformerConfig")
            return stage, text
        try:
            built = [get_num_layers_to_build(config, pp_rank=rank) for rank in range(layout["pp"])]
        except AssertionError as err:
            return "layers", str(err) or "assert in get_num_layers_to_build"
        if sum(built) != model.num_hidden_layers:
            return "layers", f"builds {built}, {sum(built)} layers of {model.num_hidden_layers}"
        if model.is_moe:
            class Probe(BaseMoELayer):
                def forward(self, hidden_states):
                    return hidden_states

            pg = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "ep"])
            try:
                Probe(config, layer_number=1, pg_collection=pg)
            except AssertionError as err:
                return "moe", str(err) or "num_moe_experts % ep_size"
        return "", ""
    finally:
        ps.destroy_model_parallel()


MOE30 = "Qwen/Qwen3-30B-A3B-Base"  # 48 layers, 32 heads, 4 KV heads, 128 experts
DENSE8 = "Qwen/Qwen3-8B-Base"  # 36 layers, 32 heads, 8 KV heads
DSV3 = "deepseek-ai/DeepSeek-V3"  # 61 layers, 128 heads, 128 KV heads, 256 experts

# (model, GPUs, training.parallel) -> each is validated by fp8spec and started by megatron-core
LAYOUTS = [
    (MOE30, 16, {"tp": 4, "pp": 2, "ep": 8}),  # the qwen3-30b example: etp defaults to 1
    (MOE30, 16, {"tp": 4, "pp": 2, "ep": 8, "etp": 4}),  # verl's null etp (= tp): needs 64 GPUs
    (MOE30, 16, {"tp": 4, "pp": 1, "ep": 8, "etp": 4}),  # the SGLang 30B example as it was: needs 32
    (MOE30, 24, {"tp": 1, "ep": 24}),  # 128 experts at ep 24
    (MOE30, 24, {"tp": 1, "ep": 8}),
    (MOE30, 16, {"tp": 3, "ep": 1}),  # 16 GPUs over tp 3
    (MOE30, 24, {"tp": 3, "ep": 8, "etp": 1}),  # 32 heads at tp 3
    (MOE30, 16, {"tp": 8, "ep": 8, "etp": 1}),  # 4 KV heads, tp 8: tp is a multiple of the groups
    (MOE30, 16, {"tp": 4, "pp": 2, "cp": 2, "ep": 4}),
    (MOE30, 32, {"tp": 1, "pp": 32, "ep": 1}),  # 48 layers at pp 32
    (MOE30, 40, {"tp": 1, "pp": 5, "ep": 8}),  # 48 layers at pp 5
    (MOE30, 40, {"tp": 1, "pp": 5, "ep": 8, "first_stage_layers": 8, "last_stage_layers": 8}),  # 32 middle over 3
    (MOE30, 40, {"tp": 1, "pp": 5, "ep": 8, "first_stage_layers": 12, "last_stage_layers": 12}),  # 24 middle over 3
    (DENSE8, 8, {"tp": 1, "pp": 8}),  # 36 layers at pp 8
    (DENSE8, 8, {"tp": 1, "pp": 8, "first_stage_layers": 6, "last_stage_layers": 6}),
    (DENSE8, 8, {"tp": 2, "pp": 4}),
    (DENSE8, 8, {"tp": 1, "ep": 2}),  # expert parallelism on a dense model
    (DENSE8, 16, {"tp": 16}),  # 8 KV groups divide tp 16
    (DENSE8, 24, {"tp": 12, "pp": 2}),  # 32 heads at tp 12
    (DENSE8, 8, {"tp": 1, "first_stage_layers": 36}),  # pp 1, first stage = every layer: accepted
    (DENSE8, 8, {"tp": 1, "first_stage_layers": 18, "last_stage_layers": 10}),  # pp 1: builds 10 layers
    (DENSE8, 8, {"tp": 1, "pp": 2, "first_stage_layers": 20}),
    (DENSE8, 8, {"tp": 1, "pp": 2, "first_stage_layers": 20, "last_stage_layers": 20}),  # -4 middle layers
    ("Qwen/Qwen2.5-7B", 7, {"tp": 7}),  # 28 heads split, but 4 KV groups and tp 7: neither divides
    ("Qwen/Qwen2.5-7B", 8, {"tp": 4, "pp": 2}),
    (DSV3, 32, {"tp": 8, "pp": 4, "ep": 8}),  # 61 layers at pp 4
    (DSV3, 32, {"tp": 8, "pp": 4, "ep": 8, "first_stage_layers": 16, "last_stage_layers": 15}),
    (DSV3, 32, {"tp": 8, "pp": 4, "ep": 8, "etp": 8}),  # verl's null etp on 4x8: needs 256 GPUs
    (DSV3, 32, {"tp": 4, "ep": 32}),
    (DSV3, 16, {"tp": 16, "cp": 1, "ep": 16}),
]


def _spec(model_id: str, gpus: int, parallel: dict) -> dict:
    nodes, per_node = (gpus // 8, 8) if gpus % 8 == 0 else (1, gpus)
    return patched(BASE_SPEC, {"model": {"name": model_id, "path": "/models/m"},
                               "hardware": {"gpu": "h100", "nodes": nodes, "gpus_per_node": per_node},
                               "kv_cache": {"dtype": "bf16"},
                               "training": {"backend": "megatron", "precision": "bf16", "parallel": parallel}})


def _layout(m) -> dict:
    return {"world": m.world, "tp": m.tp, "pp": m.pp, "cp": m.cp, "ep": m.ep, "etp": m.etp,
            "first": m.first_stage_layers, "last": m.last_stage_layers}


@pytest.mark.parametrize("model_id,gpus,parallel", LAYOUTS,
                         ids=[f"{m.split('/')[1]}-{g}gpu-" + "-".join(f"{k}{v}" for k, v in p.items())
                              for m, g, p in LAYOUTS])
def test_fp8spec_refuses_iff_megatron_refuses(model_id, gpus, parallel, validate, one_process_world, monkeypatch):
    result = validate(_spec(model_id, gpus, parallel))
    ours = sorted({d.code for d in result.errors} & LAYOUT_RULES)
    stage, message = megatron_refusal(result.context.model, _layout(result.context.megatron), monkeypatch)
    assert bool(ours) == bool(stage), f"fp8spec {ours or 'accepts'}; megatron-core {stage or 'accepts'}: {message}"
    if stage:
        assert STAGE_RULE[stage] in ours, (stage, message, ours)


@pytest.mark.parametrize("spec_path,backend", [c for c in cases() if c[1].startswith("megatron")],
                         ids=lambda v: getattr(v, "stem", v))
def test_example_bundle_layout_starts(spec_path, backend, one_process_world, monkeypatch):
    """The layout each Megatron example bundle emits (its overrides) passes megatron-core's start-up checks."""
    from ruamel.yaml import YAML

    from fp8spec.rules.runner import validate_path
    from tests.conformance.checks import megatron_overrides

    tc, _, par = megatron_overrides(list(YAML(typ="safe").load(compile_files(spec_path, backend)["overrides.yaml"])))
    validation = validate_path(spec_path)
    model, spec = validation.context.model, validation.loaded.spec
    layout = {"world": spec.world_size, "tp": par["tensor_model_parallel_size"],
              "pp": par["pipeline_model_parallel_size"], "cp": par["context_parallel_size"],
              "ep": par["expert_model_parallel_size"], "etp": par.get("expert_tensor_parallel_size"),
              "first": tc.get("num_layers_in_first_pipeline_stage"),
              "last": tc.get("num_layers_in_last_pipeline_stage")}
    assert megatron_refusal(model, layout, monkeypatch) == ("", "")
    if layout["etp"] is None or layout["etp"] == layout["tp"] or layout["etp"] * layout["ep"] * layout["pp"] != (
        layout["world"]
    ):
        return  # verl's null (= tp) gives the same layout: nothing more to show
    # without the etp the bundle sets, verl's null (= tp) is what was seen to fail at Megatron init
    stage, message = megatron_refusal(model, dict(layout, etp=None), monkeypatch)
    assert stage == "initialize_model_parallel" and "expert_tensor_model_pipeline_parallel size" in message
