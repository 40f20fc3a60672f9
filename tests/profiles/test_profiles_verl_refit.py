"""BLK007's verl fact, read from the installed verl's source (statically: it imports vLLM): its FP8 weight sync
re-runs process_weights_after_loading only on layers whose FP8 parameters changed shape or dtype, or are
marked is_shuffled."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

from fp8spec.profiles import load_profile
from tests.conftest import skip_missing_extra

if importlib.util.find_spec("verl") is None:
    skip_missing_extra("verl is not installed (pip install --no-deps verl==0.9.1)", allow_module_level=True)
FACT = load_profile("verl", importlib.metadata.version("verl")).value("capability.vllm_fp8_refit_reprocess")


def _tree(relative: str) -> ast.Module:
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    return ast.parse((root / relative).read_text(encoding="utf-8"))


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_staging_decides_on_shape_dtype_and_is_shuffled_only():
    needs = _function(_tree("utils/vllm/vllm_fp8_utils.py"), "_layer_needs_fp8_staging")
    reasons = [
        ast.unparse(n.test)
        for n in ast.walk(needs)
        if isinstance(n, ast.If) and any(isinstance(s, ast.Return) and ast.unparse(s) == "return True" for s in n.body)
    ]
    seen = set()
    for test in reasons:
        seen |= {"shape_changed"} if ".shape" in test else set()
        seen |= {"dtype_changed"} if ".dtype" in test else set()
        seen |= {"is_shuffled"} if "is_shuffled" in test else set()
    assert len(reasons) == 2 and seen == set(FACT["reprocessed_when"])
    assert FACT["same_shape_relayout"] is False


def test_only_staged_layers_are_reprocessed():
    tree = _tree("utils/vllm/vllm_fp8_utils.py")
    stage = ast.unparse(_function(tree, "stage_fp8_params_for_loading"))
    assert "not _layer_needs_fp8_staging(layer, pristine)" in stage and "continue" in stage
    process = _function(tree, "process_fp8_weights_after_loading")
    assert process.args.args[0].arg == "layers" and "process_weights_after_loading" in ast.unparse(process)
    quant = ast.unparse(_function(_tree("utils/vllm/vllm_quant_utils.py"), "process_quanted_weights_after_loading"))
    assert "process_fp8_weights_after_loading(reload_state.get('fp8_layers') or [])" in quant
