"""replay_poll, driver side: verl's sync trainer notices finished rollouts within 0.1 s instead of 2 s.

verl 0.9.1's default trainer (``trainer.use_v1`` true, ``trainer.v1.trainer_mode`` sync) times generation around
``ReplayBuffer.sample`` (``verl/trainer/ppo/v1/trainer_base.py`` lines 565-574), which dispatches the prompts and
then sleeps ``poll_interval`` between looks at TransferQueue until the batch is complete (``replay_buffer.py``
lines 408-409 and 503). ``poll_interval`` defaults to 2.0 s (line 144) and the trainer never passes it
(``trainer_base.py`` lines 139-184), so every step's generation ends on the next multiple of 2 s after the
engine finishes: all 15 generation times of the 2026-12-04 H200 runs lie within 0.14 s of an even second
(docs/results.md#real-size-rl-step). The sleep is lost time: the trainer waits, and the engine has finished.

The patch lowers the interval of sync-mode buffers that verl built with the default; a buffer given an interval,
and the async modes (whose trainers read the interval as a threshold, ``trainer_separate_async.py`` line 299),
keep theirs. The poll reads TransferQueue's metadata only, so ten looks a second cost the driver little.
"""

from __future__ import annotations

import functools
import inspect
import logging
from types import ModuleType
from typing import Any

from fp8spec.runtime.envs import REPLAY_POLL_S
from fp8spec.runtime.targets import MOD_REPLAY_BUFFER  # noqa: F401  (the installer's target)

logger = logging.getLogger(__name__)

_MARK = "_fp8spec_replay_poll"


def patch_replay_buffer(module: ModuleType) -> bool:
    """Wrap ``ReplayBuffer.__init__``; False when already wrapped or the class has no ``poll_interval``."""
    cls = module.ReplayBuffer
    init = cls.__init__
    if getattr(init, _MARK, False):
        return False
    signature = inspect.signature(init)
    if "poll_interval" not in signature.parameters:
        logger.warning(
            "fp8spec replay_poll: %s.ReplayBuffer takes no poll_interval; not patched", module.__name__
        )
        return False
    poll_s = REPLAY_POLL_S.read()

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        given = "poll_interval" in signature.bind(self, *args, **kwargs).arguments
        if given or getattr(self, "trainer_mode", None) != "sync" or not self.poll_interval > poll_s:
            return
        logger.info(
            "fp8spec replay_poll: verl's sync replay buffer looks for finished rollouts every %g s (verl's "
            "default %g s ends each step's generation on the next multiple of it)",
            poll_s,
            self.poll_interval,
        )
        self.poll_interval = poll_s

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__
    return True
