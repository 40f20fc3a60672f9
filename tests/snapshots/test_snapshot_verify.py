"""Every committed snapshot still matches the real release artifact it names (CI runs this).

Cost: the first run downloads every artifact through pip into ``$FP8SPEC_CACHE/wheels``
(default ``~/.cache/fp8spec/wheels``): about 670 MB, dominated by the two vLLM wheels (279 MB + 336 MB).
With that folder cached between CI runs, nothing is downloaded (a cached file whose sha256 matches the
snapshot is used as is) and the whole module takes about 15 s on 2 cores. Needs hydra-core for verl.
"""

from __future__ import annotations

import pytest

from fp8spec.snapshots import list_snapshots, verify
from fp8spec.snapshots.core import rebuild

pytestmark = pytest.mark.slow

SNAPSHOTS = list_snapshots()


def test_there_are_snapshots_to_verify():
    assert len(SNAPSHOTS) >= 8


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_snapshot_still_confirmed_by_its_artifact(path):
    problems = verify(path)
    assert problems == [], "stale snapshot (regenerate with fp8spec.snapshots.refresh):\n" + "\n".join(problems)
    # refresh would write exactly the committed bytes (deterministic output)
    assert rebuild(path) == path.read_text(encoding="utf-8")
