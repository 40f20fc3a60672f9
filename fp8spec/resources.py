"""Where the data that ships with fp8spec lives.

In a wheel, templates/, backends/ and specs/ are packed under ``fp8spec/_data`` (see pyproject's
force-include); in a source checkout or editable install they sit at the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_DATA_DIRS = ("templates", "backends", "specs")


def data_dir(name: str) -> Path:
    """Return the folder of shipped data called ``name`` (templates, backends or specs)."""
    if name not in _DATA_DIRS:
        raise ValueError(f"unknown data folder {name!r}; expected one of {_DATA_DIRS}")
    packed = _PACKAGE_DIR / "_data" / name
    if packed.is_dir():
        return packed
    checkout = _PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"fp8spec data folder {name!r} is missing from this installation")
