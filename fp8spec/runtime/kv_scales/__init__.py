"""Engine-side pieces of the runtime patches (vLLM worker, SGLang custom loader, vLLM plugin), and how each rollout
engine receives what the trainer side computes."""

# How the trainer's KV scales reach each rollout engine under verl (kv_hooks.attach_kv_calibration), by verl's
# rollout name: "weight_stream" = inside the trainer's weight stream, which verl's vLLM worker extension unpacks
# (vllm_kv.patch_verl_worker_extension); "rollout_update" = after the rollout's own weight update, posted to the
# engine's custom weight loader (sglang_kv.load_kv_scales).
KV_SCALE_ROUTES = {"vllm": "weight_stream", "sglang": "rollout_update"}


def kv_scale_route(rollout_name: str) -> str:
    """The route of ``rollout_name``'s KV scales.

    A name not listed is an error, not vLLM's route: scales posted the wrong way never reach the engine, and the run
    would quietly keep its first (or no) KV scales."""
    try:
        return KV_SCALE_ROUTES[rollout_name]
    except KeyError:
        known = ", ".join(sorted(KV_SCALE_ROUTES))
        raise ValueError(
            f"fp8spec kv_scales: no KV-scale route for rollout engine {rollout_name!r} (known: {known})"
        ) from None
