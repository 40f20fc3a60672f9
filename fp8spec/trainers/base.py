"""What fp8spec asks of a verl trainer. One subclass per trainer folder (fp8spec/trainers/<name>/__init__.py).

Class attributes only: names and capabilities, plain data that rules, planner and compiler read.
"""

from __future__ import annotations


class Trainer:
    # ---------------------------------------------------------------------------------------------- names
    name: str = ""  # training.backend, the backend's prefix ("megatron+vllm")
    label: str = ""  # how messages name it: "Megatron"

    # ---------------------------------------------------------------------------------------------- capabilities
    # training.parallel (tp, pp, cp, ep, ...) lays the model out; without it the trainer shards data-parallel only
    parallel_layout: bool = False
    fp8_training: bool = False  # training.precision fp8 (TransformerEngine's FP8 recipes)
    router_replay: bool = False  # training.router_replay (verl's MoE routing replay)
    grad_buffer_resident: bool = False  # the gradient buffer stays on the GPU unless params are offloaded
    # what the training peak's transient term is, as the MEM005 and MEM006 messages name it
    transient_buffers: str = "transient buffers"
    router_dtype: bool = False  # training.router_dtype reaches the MoE router (moe_router_dtype)
    # the model is a Hugging Face model, whose attn_implementation takes flash_attention_2, sdpa, eager or
    # flex_attention; otherwise the attention backend is Megatron's (flash_attention_2, fused, unfused)
    hf_model: bool = True
    # training.attention values that attend a packed micro-batch through one dense mask over the whole row, so
    # packing several sequences costs attention work (rule PAR016); the others attend each sequence on its own
    dense_mask_attention: tuple[str, ...] = ()
    # training.bridge picks the package that converts checkpoints (mbridge or Megatron-Bridge), which the
    # preflight checks
    bridge: bool = False
    # the profile and fact of the flash-attn package that training.attention flash_attention_2 needs
    flash_attention_package: tuple[str, str] = ("verl", "package.flash_attention_2")
    # verl's model_engine value selecting this trainer; "" keeps verl's default (FSDP)
    verl_model_engine: str = ""
    # "module:function" that adds this trainer's own settings to a verl bundle (plan, valid spec, verl keys); the
    # compiler imports it when it builds such a bundle
    settings_adapter: str = ""
    # stack fields (backends/stack.yaml) a run on this trainer uses besides verl and the rollout engine
    stack_fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"<trainer {self.name}>"
