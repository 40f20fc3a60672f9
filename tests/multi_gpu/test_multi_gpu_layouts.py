"""The Megatron layouts of the two- and four-GPU bundles pass megatron-core's own start-up checks (the same CPU
harness as tests/conformance/test_megatron_layout.py: initialize_model_parallel, TransformerConfig, the layers per
pipeline stage, the experts per EP rank), read from each compiled bundle's overrides."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from tests.cli.inprocess import run_cli_here
from tests.conformance.test_megatron_layout import megatron_refusal, one_process_world  # noqa: F401 (fixture)
from tests.conftest import REPO

SPECS = [p for p in sorted((REPO / "benchmarks/multi_gpu/specs").glob("*.yaml"))
         if YAML(typ="safe").load(p.read_text(encoding="utf-8"))["training"]["backend"] == "megatron"]


def test_every_megatron_layout_asked_for_is_checked():
    assert [p.stem for p in SPECS] == ["h200x2-moe-megatron-ep2", "h200x4-30b30l-pp2ep2", "h200x4-30b30l-tp2ep2",
                                       "h200x4-moe-pp2ep2", "h200x4-moe-tp2ep2"]


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_the_bundles_layout_starts_in_megatron_core(spec, tmp_path, one_process_world, monkeypatch):  # noqa: F811
    from fp8spec.rules.runner import validate_path
    from tests.conformance.checks import megatron_overrides

    assert run_cli_here("compile", str(spec), "-o", str(tmp_path)).returncode == 0
    rows = YAML(typ="safe").load((tmp_path / spec.stem / "overrides.yaml").read_text(encoding="utf-8"))
    tc, _, par = megatron_overrides(list(rows))
    validation = validate_path(spec)
    model, world = validation.context.model, validation.loaded.spec.world_size
    layout = {"world": world, "tp": par["tensor_model_parallel_size"], "pp": par["pipeline_model_parallel_size"],
              "cp": par["context_parallel_size"], "ep": par["expert_model_parallel_size"],
              "etp": par.get("expert_tensor_parallel_size"),
              "first": tc.get("num_layers_in_first_pipeline_stage"),
              "last": tc.get("num_layers_in_last_pipeline_stage")}
    assert layout["tp"] * layout["pp"] * layout["cp"] <= world == int(spec.stem[len("h200x")])
    assert megatron_refusal(model, layout, monkeypatch) == ("", "")
    # the check has teeth: the same model at twice the expert parallelism this world holds is refused
    assert megatron_refusal(model, dict(layout, ep=2 * world), monkeypatch)[0] == "initialize_model_parallel"
