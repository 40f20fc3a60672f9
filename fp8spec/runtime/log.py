"""Where the patch set's log lines go: stderr of the process, at INFO unless FP8SPEC_LOG_LEVEL says otherwise.

verl and vLLM configure only their own loggers (vLLM at WARN under verl's runtime env), so without a handler
of its own the per-sync lines of the patch set (scale ranges, quantizer times) would be dropped in every Ray
worker. Ray forwards worker stderr to the driver, so the lines reach the run's log.
"""

from __future__ import annotations

import logging

from fp8spec.runtime.envs import LOG_LEVEL

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def install() -> logging.Logger:
    """Give the 'fp8spec' logger one stderr handler (idempotent); level from FP8SPEC_LOG_LEVEL (default INFO)."""
    logger = logging.getLogger("fp8spec")
    level = LOG_LEVEL.read()
    logger.setLevel(level if isinstance(logging.getLevelName(level), int) else "INFO")
    if not any(getattr(h, "_fp8spec", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(_FORMAT))
        handler._fp8spec = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    return logger
