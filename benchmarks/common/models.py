"""Model folders from the fp8spec catalog: config.json only, so an engine's ``load_format="dummy"`` builds the
real shapes with random weights. Needs pyyaml only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "fp8spec" / "catalog" / "models"
MODELS = {"qwen3-8b": "Qwen/Qwen3-8B-Base", "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B-Base"}
MODEL_ROOT = "/tmp/fp8spec-models"


def catalog_config(model_id: str) -> dict:
    """config.json of a catalog model (the catalog entry's ``config`` is the config.json text)."""
    path = CATALOG / (model_id.replace("/", "--") + ".yaml")
    cfg = dict(yaml.safe_load(path.read_text(encoding="utf-8"))["config"])
    # PyYAML (YAML 1.1) reads JSON's 1e-06 as a string; the catalog's own reader does not
    return {k: float(v) if isinstance(v, str) and re.fullmatch(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", v) else v
            for k, v in cfg.items()}


def model_dir(model_id: str, root: str = MODEL_ROOT) -> str:
    """A folder holding only config.json: with load_format='dummy' the engine builds real shapes, random weights."""
    folder = Path(root) / model_id.replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(catalog_config(model_id), indent=2), encoding="utf-8")
    return str(folder)
