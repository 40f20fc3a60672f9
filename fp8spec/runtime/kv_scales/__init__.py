"""Engine-side pieces of the runtime patches (vLLM worker, SGLang custom loader, vLLM plugin), and how each rollout
engine receives what the trainer side computes."""

# How the trainer's KV scales reach each rollout engine under verl (kv_hooks.attach_kv_calibration), by verl's
# rollout name: "weight_stream" = inside the trainer's weight stream, which verl's vLLM worker extension unpacks
# (vllm_kv.patch_verl_worker_extension); "rollout_update" = after the rollout's own weight update, posted to the
# engine's custom weight loader (sglang_kv.load_kv_scales).
KV_SCALE_ROUTES = {"vllm": "weight_stream", "sglang": "rollout_update"}


def kv_scale_route(rollout_name: str) -> str:
    """The route of ``rollout_name``'s KV scales; verl's default rollout (vLLM's) for a name it does not list."""
    return KV_SCALE_ROUTES.get(rollout_name, KV_SCALE_ROUTES["vllm"])
