"""Reading a local config.json file: size and encoding limits, strict JSON, located errors.

Never touches the network: only the given local file is read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from fp8spec.bounded_read import ReadError, read_regular

from ._parse import facts_from_dict, type_name
from ._types import ConfigError, ModelFacts

#: largest config.json accepted (real ones are a few KiB)
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


# As in a spec (E010): no config value has more digits; Python refuses to convert over 4300 anyway.
MAX_INT_DIGITS = 100


class _LongNumber(ValueError):
    def __init__(self, digits: str) -> None:
        super().__init__(digits[:20])
        self.digits = digits


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _LongNumber(digits)
    return int(digits)


def _position(text: str, token: str) -> tuple[int, int]:
    """1-based line and column of the first ``token`` in ``text`` standing as a number of its own."""
    m = re.search(r"(?<![0-9.])" + re.escape(token) + r"(?![0-9])", text)
    at = m.start() if m else 0
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def read_config_file(path: str | os.PathLike[str]) -> tuple[dict, Path]:
    """Read and parse a local config.json. A directory is accepted when it holds a ``config.json``."""
    from fp8spec.specfile.paths import PathError, expand_user

    try:
        p = Path(expand_user(os.fsdecode(path)))
    except TypeError:
        raise ConfigError(f"config path must be a file path, got {type_name(path)}") from None
    except PathError as err:
        raise ConfigError(str(err), path=os.fsdecode(path)) from None
    shown = str(p)
    try:
        if p.is_dir():
            inner = p / "config.json"
            if not inner.is_file():
                raise ConfigError(
                    f"{shown}: is a directory, not a config.json (and it holds no config.json)", path=shown
                )
            p, shown = inner, str(inner)
        data = read_regular(p, MAX_CONFIG_BYTES, "config.json")
    except ReadError as e:
        why = str(e)
        if "not found" in why:
            why = "no such file"
        elif "larger than the limit" in why:
            why = f"too large for a config.json (limit {MAX_CONFIG_BYTES} bytes)"
        raise ConfigError(f"{shown}: {why}", path=shown) from None
    except OSError as e:
        raise ConfigError(f"{shown}: cannot read: {e.strerror or e}", path=shown) from None
    except ValueError as e:  # e.g. embedded NUL in the path
        raise ConfigError(f"{shown}: invalid path: {e}", path=shown) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{shown}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", path=shown
        ) from None
    if not text.strip():
        raise ConfigError(f"{shown}: empty file, expected a JSON object", path=shown)
    try:
        cfg = json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant, parse_int=_bounded_int
        )
    except _LongNumber as e:
        line, col = _position(text, e.digits)
        raise ConfigError(
            f"{shown}:{line}:{col}: a number with {len(e.digits.lstrip('-'))} digits (more than "
            f"{MAX_INT_DIGITS}): not a config value",
            path=shown,
        ) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{shown}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}", path=shown) from None
    except RecursionError:
        raise ConfigError(f"{shown}: invalid JSON: nested too deeply", path=shown) from None
    except ValueError as e:  # duplicate keys, NaN/Infinity, integers with too many digits
        raise ConfigError(f"{shown}: invalid JSON: {e}", path=shown) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{shown}: a config.json must be a JSON object, got {type_name(cfg)}", path=shown)
    return cfg, p


def model_from_config(path: str | os.PathLike[str], model_id: str | None = None) -> ModelFacts:
    """Build :class:`ModelFacts` from a local Hugging Face ``config.json`` (or a directory holding one).

    ``model_id`` names the result; by default the config's ``_name_or_path``, else the file path.
    Raises :class:`ConfigError` for anything that is not a readable config of a supported architecture.
    """
    cfg, p = read_config_file(path)
    name = model_id
    if not name:
        nop = cfg.get("_name_or_path")
        name = nop if isinstance(nop, str) and nop.strip() else str(p)
    return facts_from_dict(cfg, model_id=name, source=f"config.json: {p}", where=str(p), path=str(p))


__all__ = ["MAX_CONFIG_BYTES", "model_from_config", "read_config_file"]
