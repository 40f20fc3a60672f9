"""The embedded catalog: ``fp8spec/catalog/models/<org>--<name>.yaml``, one model per file.

Each file holds ``id``, ``source`` (where the numbers come from) and ``config`` (the model's config.json,
transcribed). ``get_model`` feeds ``config`` through the same parser as ``model_from_config``.
"""

from __future__ import annotations

import difflib
from functools import cache, lru_cache
from pathlib import Path

from ._parse import facts_from_dict
from ._types import ConfigError, ModelFacts, UnknownModel

MODELS_DIR = Path(__file__).resolve().parent / "models"
_SUFFIX = ".yaml"


def id_to_filename(model_id: str) -> str:
    return model_id.replace("/", "--") + _SUFFIX


def filename_to_id(filename: str) -> str:
    return filename[: -len(_SUFFIX)].replace("--", "/", 1)


@lru_cache(maxsize=1)
def _ids() -> tuple[str, ...]:
    return tuple(sorted(filename_to_id(p.name) for p in MODELS_DIR.glob("*" + _SUFFIX)))


def catalog_ids() -> list[str]:
    """Every model id in the catalog, sorted."""
    return list(_ids())


def load_entry(model_id: str) -> dict:
    """The raw catalog entry (``id``, ``source``, ``config``) of a catalog id."""
    from ruamel.yaml import YAML

    path = MODELS_DIR / id_to_filename(model_id)
    yaml = YAML(typ="safe", pure=True)
    with path.open("r", encoding="utf-8") as fh:
        entry = yaml.load(fh)
    if (
        not isinstance(entry, dict)
        or entry.get("id") != model_id
        or not isinstance(entry.get("config"), dict)
    ):
        raise ConfigError(
            f"catalog entry {path.name}: needs 'id: {model_id}', 'source' and a 'config' mapping"
        )
    if not isinstance(entry.get("source"), str) or not entry["source"].strip():
        raise ConfigError(f"catalog entry {path.name}: 'source' must say where the numbers come from")
    return entry


@cache
def _get(model_id: str) -> ModelFacts:
    entry = load_entry(model_id)
    return facts_from_dict(
        entry["config"],
        model_id=model_id,
        source=entry["source"].strip(),
        where=f"catalog entry {model_id}",
    )


def suggest(name: object, ids: tuple[str, ...] | list[str], limit: int = 3) -> list[str]:
    """Close catalog ids for a mistyped name: case-insensitive match, same model name under another (or no)
    organisation, then fuzzy matches."""
    if not isinstance(name, str) or not name.strip():
        return []
    want = name.strip().lower()
    lower = {i.lower(): i for i in ids}
    out: list[str] = []

    def add(i: str) -> None:
        if i not in out:
            out.append(i)

    if want in lower:
        add(lower[want])
    tail = want.rpartition("/")[2]
    for low, i in lower.items():
        if low.rpartition("/")[2] == tail:
            add(i)
    for low in sorted((low for low in lower if low.startswith(want)), key=len):  # a name cut short
        add(lower[low])
    # the same family and size under another release name ("Qwen3-235B-A22B-Instruct-2507" -> "Qwen3-235B-A22B",
    # "Llama-3.3-70B" -> "Llama-3.3-70B-Instruct"): most leading '-'-separated words in common first, at least two
    words = tail.split("-")
    related = []
    for low, i in lower.items():
        theirs = low.rpartition("/")[2].split("-")
        shared = next(
            (n for n, (a, b) in enumerate(zip(words, theirs)) if a != b), min(len(words), len(theirs))
        )
        if shared >= 2:
            related.append((-shared, i))
    for _, i in sorted(related):
        add(i)
    for low in difflib.get_close_matches(want, list(lower), n=limit, cutoff=0.75):
        add(lower[low])
    if len(out) < limit:
        tails = {low.rpartition("/")[2]: i for low, i in lower.items()}
        for t in difflib.get_close_matches(tail, list(tails), n=limit, cutoff=0.75):
            add(tails[t])
    return out[:limit]


def get_model(name: str) -> ModelFacts:
    """The catalog's facts for ``name`` (exact id, e.g. ``Qwen/Qwen3-30B-A3B-Base``).

    Raises :class:`UnknownModel` (with suggestions) for anything else; lookup is case-sensitive.
    """
    ids = _ids()
    if isinstance(name, str) and name in ids:
        return _get(name)
    raise UnknownModel(name, suggest(name, ids), list(ids))
