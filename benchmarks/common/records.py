"""The records a configurations driver writes (``results.jsonl``), read from folders' files or packed archives."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path


def read_records(paths: list[str]) -> list[dict]:
    """Every record of every ``results.jsonl`` given directly or inside a ``.tgz``/``.tar.gz``."""
    out: list[dict] = []
    for p in paths:
        if p.endswith((".tgz", ".tar.gz")):
            with tarfile.open(p) as tar:
                for m in tar.getmembers():
                    if m.name.endswith("results.jsonl"):
                        f = tar.extractfile(m)
                        assert f is not None
                        out += [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
        else:
            out += [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
    return out
