"""The catalog covers the models the field RL-trains; each entry is checked against
transformers' module names by test_catalog_entries_vs_transformers.py. Meta released Llama 3.3 70B as Instruct
only (model card: "70B Instruct: December 6, 2024"), so there is no base 3.3 entry."""

from __future__ import annotations

from fp8spec.catalog import catalog_ids, get_model

REQUIRED = {
    "Qwen/Qwen3-0.6B": "Qwen3ForCausalLM",
    "Qwen/Qwen3-1.7B": "Qwen3ForCausalLM",
    "Qwen/Qwen3-4B": "Qwen3ForCausalLM",
    "Qwen/Qwen3-8B": "Qwen3ForCausalLM",
    "Qwen/Qwen3-14B": "Qwen3ForCausalLM",
    "Qwen/Qwen3-32B": "Qwen3ForCausalLM",
    "Qwen/Qwen3-235B-A22B": "Qwen3MoeForCausalLM",
    "meta-llama/Llama-3.1-70B": "LlamaForCausalLM",
    "meta-llama/Llama-3.1-70B-Instruct": "LlamaForCausalLM",
    "meta-llama/Llama-3.3-70B-Instruct": "LlamaForCausalLM",
    "mistralai/Mixtral-8x7B-v0.1": "MixtralForCausalLM",
    "mistralai/Mixtral-8x22B-v0.1": "MixtralForCausalLM",
    "google/gemma-3-1b-it": "Gemma3ForCausalLM",
    "google/gemma-3-4b-it": "Gemma3ForConditionalGeneration",
    "google/gemma-3-12b-it": "Gemma3ForConditionalGeneration",
    "google/gemma-3-27b-it": "Gemma3ForConditionalGeneration",
    "zai-org/GLM-4.5-Air": "Glm4MoeForCausalLM",
    "deepseek-ai/DeepSeek-V2-Lite": "DeepseekV2ForCausalLM",
}


def test_the_field_models_are_in_the_catalog_with_their_architecture():
    ids = set(catalog_ids())
    assert not set(REQUIRED) - ids, sorted(set(REQUIRED) - ids)
    assert {m: get_model(m).architecture for m in REQUIRED} == REQUIRED


def test_qwen3_dense_sizes_are_ordered_0_6b_to_32b():
    sizes = [get_model(f"Qwen/Qwen3-{s}").num_parameters() for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")]
    assert sizes == sorted(sizes) and 0.5e9 < sizes[0] < 0.8e9 and 31e9 < sizes[-1] < 34e9
