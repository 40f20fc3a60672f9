"""vLLM 0.24.0's own weight-mapping tables for Qwen3 / Qwen3-MoE, read statically from the released wheel.

Nothing here is a copy: ``stacked_params_mapping`` is the list literal inside the models' ``load_weights``,
``packed_modules_mapping`` the class attribute, and the expert mapping is produced by running the source of
``RoutedExperts.make_expert_params_mapping`` and ``EplbState.build_initial_global_physical_to_logical_map``
taken from the wheel (pure Python; the only input they read from the model is its parameter names)."""

from __future__ import annotations

import ast
import json
import textwrap
from functools import lru_cache

from fp8spec.snapshots import list_snapshots
from fp8spec.snapshots.artifacts import open_artifact
from fp8spec.snapshots.core import artifact_for

QWEN2 = "vllm/model_executor/models/qwen2.py"
QWEN3 = "vllm/model_executor/models/qwen3.py"
QWEN3_MOE = "vllm/model_executor/models/qwen3_moe.py"
ROUTED = "vllm/model_executor/layers/fused_moe/routed_experts.py"
EPLB = "vllm/distributed/eplb/eplb_state.py"
LINEAR = "vllm/model_executor/layers/linear.py"
VOCAB = "vllm/model_executor/layers/vocab_parallel_embedding.py"
LAYERNORM = "vllm/model_executor/layers/layernorm.py"
WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
FILES = (QWEN2, QWEN3, QWEN3_MOE, ROUTED, EPLB, LINEAR, VOCAB, LAYERNORM, WEIGHT_UTILS)


def _installed() -> dict[str, str] | None:
    """The same files from an installed vLLM 0.24.0 (the device's offline set has no wheel cache)."""
    import importlib.metadata
    import importlib.util
    from pathlib import Path

    try:
        if importlib.metadata.version("vllm").split("+")[0] != "0.24.0":
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    spec = importlib.util.find_spec("vllm")
    root = Path(spec.origin).parent.parent if spec and spec.origin else None
    if root is None:
        return None
    return {m: (root / m).read_text(encoding="utf-8") for m in FILES}


@lru_cache(maxsize=1)
def sources() -> dict[str, str]:
    installed = _installed()
    if installed is not None:
        return installed
    (path,) = [p for p in list_snapshots() if p.name == "vllm-0.24.0.json"]
    with open_artifact(artifact_for(json.loads(path.read_text(encoding="utf-8")))) as art:
        return {m: art.read_text(m) for m in FILES}


def _method(src: str, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(src)
    c = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == name)


def loader_source(qualname: str) -> str:
    """The source of a weight loader named as ``fp8spec.runtime.weight_sync.receiver.direct_sync_plan.COPY_LOADERS`` names it."""
    where = {
        "default_weight_loader": WEIGHT_UTILS,
        "ReplicatedLinear.weight_loader": LINEAR,
        "VocabParallelEmbedding.weight_loader": VOCAB,
    }[qualname]
    src = sources()[where]
    if "." in qualname:
        return ast.unparse(_method(src, *qualname.split(".")))
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == qualname)
    return ast.unparse(fn)


def class_methods(path: str, cls: str) -> list[str]:
    """The methods a class of the wheel defines itself (not inherited)."""
    c = next(n for n in ast.parse(sources()[path]).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return [n.name for n in c.body if isinstance(n, ast.FunctionDef)]


def class_init_source(path: str, cls: str) -> str:
    return ast.unparse(_method(sources()[path], cls, "__init__"))


def stacked_params_mapping(model: str) -> list[tuple]:
    """The literal list assigned to ``stacked_params_mapping`` in ``<model>.load_weights``."""
    src, cls = {"qwen3": (QWEN2, "Qwen2Model"), "qwen3_moe": (QWEN3_MOE, "Qwen3MoeModel")}[model]
    fn = _method(sources()[src], cls, "load_weights")
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "stacked_params_mapping":
            return [tuple(t) for t in ast.literal_eval(node.value)]
    raise LookupError(f"{cls}.load_weights has no stacked_params_mapping")


def packed_modules_mapping(model: str) -> dict[str, list[str]]:
    src, cls = {"qwen3": (QWEN3, "Qwen3ForCausalLM"), "qwen3_moe": (QWEN3_MOE, "Qwen3MoeForCausalLM")}[model]
    c = next(n for n in ast.parse(sources()[src]).body if isinstance(n, ast.ClassDef) and n.name == cls)
    for node in c.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "packed_modules_mapping":
            return ast.literal_eval(node.value)
    raise LookupError(cls)


def _load(fn: ast.FunctionDef, ns: dict):
    fn.decorator_list = []
    code = textwrap.dedent(ast.unparse(fn))
    exec(compile(code, f"<vllm 0.24.0 {fn.name}>", "exec"), ns)  # the wheel's own code, pure Python
    return ns[fn.name]


class _NamedParams:
    """The only thing make_expert_params_mapping asks of the model: its parameter names (for 'base_layer.')."""

    def __init__(self, names):
        self._names = list(names)

    def named_parameters(self):
        return [(n, None) for n in self._names]


def expert_params_mapping(num_experts: int, param_names=(), num_redundant_experts: int = 0) -> list[tuple]:
    """``Qwen3MoeModel.get_expert_mapping`` (qwen3_moe.py 519-529) through the wheel's own functions."""
    build = _load(_method(sources()[EPLB], "EplbState", "build_initial_global_physical_to_logical_map"), {})

    class EplbState:
        build_initial_global_physical_to_logical_map = staticmethod(build)

    make = _load(
        _method(sources()[ROUTED], "RoutedExperts", "make_expert_params_mapping"),
        {"EplbState": EplbState, "torch": None},
    )
    return make(
        _NamedParams(param_names), "gate_proj", "down_proj", "up_proj", num_experts, num_redundant_experts
    )
