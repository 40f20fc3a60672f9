"""Engine kernels that re-lay FP8 weights after loading (they break FP8 refit): the profile facts read back
against the released vLLM 0.24.0 and SGLang 0.5.12 wheels (read statically, as the snapshot checks do)."""

from __future__ import annotations

import ast
import json

import pytest

from fp8spec.profiles import load_profile
from fp8spec.snapshots import list_snapshots
from fp8spec.snapshots.artifacts import open_artifact
from fp8spec.snapshots.core import artifact_for

pytestmark = pytest.mark.slow  # the wheels come from the snapshot cache (downloaded once)

VLLM = load_profile("vllm", "0.24.0")
SGLANG = load_profile("sglang", "0.5.12")


def _source(name: str, member: str) -> str:
    (path,) = [p for p in list_snapshots() if p.name == name]
    with open_artifact(artifact_for(json.loads(path.read_text(encoding="utf-8")))) as art:
        return art.read_text(member)


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _backends(node: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Fp8MoeBackend"
    }


@pytest.fixture(scope="module")
def oracle() -> ast.Module:
    return ast.parse(_source("vllm-0.24.0.json", "vllm/model_executor/layers/fused_moe/oracle/fp8.py"))


def test_vllm_relayout_and_as_loaded_backends(oracle):
    convert = _function(oracle, "convert_to_fp8_moe_kernel_format")
    chain = next(n for n in convert.body if isinstance(n, ast.If))
    relayout: set[str] = set()
    while True:  # if/elif branches each convert the weights for one kernel family
        relayout |= _backends(chain.test)
        nxt = chain.orelse[0]
        assert isinstance(nxt, ast.If)
        if isinstance(nxt.test, ast.Compare) and isinstance(nxt.test.ops[0], ast.NotIn):
            as_loaded = _backends(nxt.test) - relayout  # the else: `if fp8_backend not in [...]: raise`
            break
        chain = nxt
    fact = VLLM.value("capability.fp8_moe_backend_relayout")
    assert set(fact["relayout"]) == relayout
    assert set(fact["as_loaded"]) == as_loaded
    enum = next(n for n in oracle.body if isinstance(n, ast.ClassDef) and n.name == "Fp8MoeBackend")
    members = {
        t.id for s in enum.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
    }
    assert members - {"NONE"} == relayout | as_loaded


def test_vllm_moe_backend_values_and_hopper_choice(oracle):
    mapping = next(
        n.value for n in ast.walk(_function(oracle, "map_fp8_backend")) if isinstance(n, ast.Assign)
    )
    assert isinstance(mapping, ast.Dict)
    values = {
        ast.literal_eval(k): v.attr
        for k, v in zip(mapping.keys, mapping.values)
        if isinstance(v, ast.Attribute)
    }
    assert values == VLLM.value("values.moe_backend_fp8")
    priority = _function(oracle, "_get_priority_backends")
    text = ast.unparse(priority)
    auto = VLLM.value("capability.fp8_moe_backend_auto")
    assert "ep_size > 1" in text
    ep_branch = text.split("ep_size > 1", 1)[1]
    assert ep_branch.index(auto["hopper_block_fp8_ep"]) < ep_branch.index(auto["hopper_block_fp8_tp"])
    listed = [e.attr for e in next(n.value for n in ast.walk(priority) if isinstance(n, ast.Assign)).elts]
    assert [b for b in listed if b in auto["cuda_priority"]] == auto["cuda_priority"]
    assert VLLM.value("env.moe_use_deep_gemm")["name"] in ast.unparse(
        _function(oracle, "select_fp8_moe_backend")
    )


def test_sglang_runner_backends_and_relayout_sites():
    server = _source("sglang-0.5.12.json", "sglang/srt/server_args.py")
    fp8 = _source("sglang-0.5.12.json", "sglang/srt/layers/quantization/fp8.py")
    utils = _source("sglang-0.5.12.json", "sglang/srt/layers/moe/utils.py")
    runner = SGLANG.value("flag.moe_runner_backend")
    assert f'"{runner["flag"]}"' in server and f'moe_runner_backend: str = "{runner["default"]}"' in server
    gemm = SGLANG.value("flag.fp8_gemm_backend")
    assert f'"{gemm["flag"]}"' in server and f'fp8_gemm_runner_backend: str = "{gemm["default"]}"' in server
    fact = SGLANG.value("capability.fp8_relayout_after_loading")
    choices = {
        ast.literal_eval(s.value)
        for c in ast.parse(utils).body
        if isinstance(c, ast.ClassDef) and c.name == "MoeRunnerBackend"
        for s in c.body
        if isinstance(s, ast.Assign)
    }
    moe = fact["moe_runner"]
    assert set(moe["relayout"]) | set(moe["as_loaded"]) <= choices
    for site in (
        "requant_weight_ue8m0_inplace",
        "align_fp8_moe_weights_for_flashinfer_trtllm",
        "shuffle_matrix_a",
    ):
        assert site in fp8
    assert f'self.moe_runner_backend = "{fact["auto_on_blackwell_deepseek_fp8"]}"' in server


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [
        n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def test_vllm_flashinfer_cutlass_block_fp8_relayout_keeps_shapes():
    """BLK007's vLLM fact: for block FP8 the FlashInfer preparation swaps gate/up (same shape) and only the
    TRT-LLM kernel shuffles into another shape; FlashInfer CUTLASS serves block FP8 on cc 9.0; vLLM requires
    flashinfer."""
    fi = ast.parse(_source("vllm-0.24.0.json", "vllm/model_executor/layers/quantization/utils/flashinfer_utils.py"))
    prepare = _function(fi, "prepare_fp8_moe_layer_for_fi")
    assert _calls(prepare, "swap_w13_to_w31")
    shuffles = [
        n for n in ast.walk(prepare) if isinstance(n, ast.If) and _calls(n, "_shuffle_deepseek_fp8_moe_weights")
    ]
    assert shuffles and all("is_trtllm" in ast.unparse(n.test) for n in shuffles)
    cutlass = _source("vllm-0.24.0.json", "vllm/model_executor/layers/fused_moe/experts/flashinfer_cutlass_moe.py")
    scheme = ast.unparse(_function(ast.parse(cutlass), "_supports_quant_scheme"))
    block = scheme.split("kFp8Static128BlockSym, kFp8Dynamic128Sym", 1)[1]
    assert block.index("is_device_capability(90)") < block.index("or")
    fact = VLLM.value("capability.fp8_moe_relayout_keeps_shape")
    assert fact["block_fp8"] == ["FLASHINFER_CUTLASS"]
    assert set(fact["block_fp8"]) <= set(VLLM.value("capability.fp8_moe_backend_relayout")["relayout"])
    assert VLLM.value("capability.fp8_moe_backend_auto")["hopper_block_fp8_ep"] in fact["block_fp8"]
    meta = _source("vllm-0.24.0.json", "vllm-0.24.0.dist-info/METADATA")
    assert "Requires-Dist: flashinfer-python==" in meta


def test_sglang_blackwell_requant_and_an_update_that_only_reloads():
    """BLK008's SGLang facts: DeepGEMM is the auto block-FP8 path, UE8M0 requantization (with packed scales) runs
    on Blackwell only, and update_weights_from_tensor calls load_weights without re-processing."""
    utils = ast.parse(_source("sglang-0.5.12.json", "sglang/srt/layers/quantization/fp8_utils.py"))
    auto = _function(utils, "_dispatch_auto_backend").body
    first = next(n for n in auto if isinstance(n, ast.If))
    assert "ENABLE_JIT_DEEPGEMM" in ast.unparse(first.test) and "deepgemm" in ast.unparse(first.body)
    assert _calls(_function(utils, "requant_weight_ue8m0"), "transform_scale_ue8m0")
    configurer = _source("sglang-0.5.12.json", "sglang/srt/layers/deep_gemm_wrapper/configurer.py")
    assert "DEEPGEMM_SCALE_UE8M0 = DEEPGEMM_BLACKWELL" in configurer
    assert "SGLANG_ENABLE_JIT_DEEPGEMM = EnvBool(True)" in _source("sglang-0.5.12.json", "sglang/srt/environ.py")
    runner = ast.parse(_source("sglang-0.5.12.json", "sglang/srt/model_executor/model_runner.py"))
    update = ast.unparse(_function(runner, "update_weights_from_tensor"))
    assert "self.model.load_weights(named_tensors)" in update and "process_weights_after_loading" not in update
    assert SGLANG.value("capability.weight_update_reprocesses") is False
    assert SGLANG.value("capability.fp8_block_relayout_by_arch") == {"blackwell": "deep_gemm_ue8m0"}
