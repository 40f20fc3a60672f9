"""Model facts against the run: a checkpoint stored quantized, a context shorter than prompt + response."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from fp8spec.rules.examples import DEEPSEEK, Examples, fragment
from fp8spec.rules.proposals import proposal
from fp8spec.rules.registry import Finding, rule, rule_hint

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec


@rule(
    "MDL001",
    "quantized-checkpoint",
    "error",
    "The checkpoint is stored quantized but the trainer needs BF16 weights.",
    """verl's trainers load model.path as trainable weights (FSDP through transformers, Megatron through
    Megatron-Bridge; FP8 training too keeps BF16 master weights and lets TransformerEngine quantize). A
    checkpoint whose config.json carries a quantization_config (DeepSeek-V3 ships FP8 block-quantized) loads
    as an inference-only model: transformers' FineGrainedFP8HfQuantizer.is_trainable is False
    (transformers 5.10 quantizers/quantizer_finegrained_fp8.py:157), and verl's vLLM server also switches the
    rollout to the checkpoint's FP8 on its own (vllm_async_server.py:1263-1266).""",
    "convert the checkpoint to BF16 first (for DeepSeek-V3 its inference/fp8_cast_bf16.py), point model.path "
    "at the copy and model.config_path at its config.json, which has no quantization_config",
    examples=Examples(
        bad=fragment(DEEPSEEK, {"rollout": {"tp": 8}}),
        good={"model": {"name": "Qwen/Qwen3-8B-Base"}},
        message="quant_method 'fp8'",
    ),
)
def quantized_checkpoint(ctx: ResolvedSpec) -> Iterator[Finding]:
    model = ctx.known_model
    if model.quantization:
        where = "model.config_path" if ctx.spec.model.config_path else "model.name"
        yield Finding(
            f"{model.id}'s config.json has quantization_config (quant_method {model.quantization!r}): "
            "its weights are stored quantized and cannot be trained as a BF16 checkpoint",
            where,
        )


@rule(
    "MDL002",
    "context-too-long",
    "error",
    "Prompt plus response is longer than the model's context or the rollout's max_model_len.",
    """verl caps the engines' max_model_len at the model's max_position_embeddings (vllm_async_server.py:1103-1111,
    async_sglang_server.py:166-173) and cuts generation at max_model_len - prompt length (:593-599), so
    responses never reach rollout.max_response_length and the trainer sees positions the model was not
    trained for. A rollout.max_model_len below prompt + response cuts them the same way.""",
    "lower rollout.max_prompt_length / max_response_length to fit the number in the message, raise "
    "rollout.max_model_len, or use a checkpoint whose config.json allows longer contexts",
    examples=Examples(
        bad={"rollout": {"max_response_length": 40000}},
        good={"rollout": {"max_response_length": 20480}},
        message="2048 + 40000 = 42048 exceeds Qwen/Qwen3-8B-Base's max_position_embeddings 32768",
    ),
)
def context_too_long(ctx: ResolvedSpec) -> Iterator[Finding]:
    model, r = ctx.known_model, ctx.spec.rollout
    model_limit = model.max_position_embeddings
    total = r.max_prompt_length + r.max_response_length
    own = r.max_model_len if r.max_model_len is not None and total > r.max_model_len else None
    if own is None and (model_limit is None or total <= model_limit):
        return
    limit = own if own is not None else model_limit
    assert limit is not None
    fits = limit - r.max_prompt_length
    candidates: list[dict] = []
    if own is not None and (model_limit is None or total <= model_limit):
        candidates.append(
            {"rollout.max_model_len": total}
        )  # the model allows it: lengthen the rollout's context
    if fits > 0:
        candidates.append({"rollout.max_response_length": fits})
    candidates.append(
        {"rollout.max_prompt_length": limit // 8, "rollout.max_response_length": limit - limit // 8}
    )
    hint, ok = proposal(
        ctx,
        "MDL002",
        "rollout.max_response_length",
        candidates,
        "use a checkpoint whose config.json allows longer contexts",
    )
    whose = (
        f"rollout.max_model_len {limit}"
        if own is not None
        else f"{model.id}'s max_position_embeddings {limit}"
    )
    yield Finding(
        f"max_prompt_length + max_response_length = {r.max_prompt_length} + {r.max_response_length} "
        f"= {total} exceeds {whose}",
        "rollout.max_response_length",
        hint,
        ok,
    )


@rule(
    "MDL003",
    "max-model-len-beyond-model",
    "error",
    "rollout.max_model_len is longer than the model's context.",
    """verl refuses to start an engine whose max_model_len exceeds the model's max_position_embeddings:
    'max_model_len (...) should be less than or equal to max_position_embeddings' (ValueError,
    verl/workers/rollout/vllm_rollout/vllm_async_server.py:1106-1111,
    verl/workers/rollout/sglang_rollout/async_sglang_server.py:169-174).""",
    "lower rollout.max_model_len to the model's max_position_embeddings or less, or leave it out (verl then "
    "uses max_position_embeddings)",
    scope="engine",
    examples=Examples(
        bad={"rollout": {"max_model_len": 40960}},
        good={"rollout": {"max_model_len": 32768}},
        message="rollout.max_model_len 40960 exceeds Qwen/Qwen3-8B-Base's max_position_embeddings 32768",
    ),
)
def max_model_len_beyond_model(ctx: ResolvedSpec) -> Iterator[Finding]:
    model, value = ctx.known_model, ctx.spec.rollout.max_model_len
    limit = model.max_position_embeddings
    if limit is None or value is None or value <= limit:
        return
    hint, ok = proposal(
        ctx, "MDL003", "rollout.max_model_len", [{"rollout.max_model_len": limit}], rule_hint("MDL003")
    )
    yield Finding(
        f"rollout.max_model_len {value} exceeds {model.id}'s max_position_embeddings {limit}; verl "
        "refuses to start the engine",
        "rollout.max_model_len",
        hint,
        ok,
    )
