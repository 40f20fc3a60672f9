"""fp8spec: one typed FP8-RL spec, validated and compiled into launch bundles.

Kept import-light on purpose: ``fp8spec.runtime`` is imported inside GPU workers that have torch only.
"""

__version__ = "0.1.0"
