"""vLLM general plugin, the entry point ``fp8spec_runtime = "fp8spec.runtime.vllm_plugin:register"``
of ``[project.entry-points."vllm.general_plugins"]``.

vLLM calls every ``vllm.general_plugins`` entry point in each of its processes (front end, engine
core, workers) before building the model (``vllm/plugins/__init__.py``: ``DEFAULT_PLUGINS_GROUP`` 0.24.0 line 14 / 0.33.0 line 18,
``load_general_plugins`` line 69 / 77; ``VLLM_PLUGINS`` filters by name). ``register`` activates the patches named
in ``FP8SPEC_RUNTIME_PATCHES``: with it unset it does nothing. This makes the vLLM-side patches
independent of verl importing ``fp8spec.runtime`` (``VERL_USE_EXTERNAL_MODULES``); both may run,
activation is idempotent.
"""


def register() -> None:
    from fp8spec.runtime import activate

    activate()
