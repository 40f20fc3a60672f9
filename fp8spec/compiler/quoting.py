"""Quote values for each target language, so no spec value can run as code or change type.

Hydra: strings are always single-quoted (Hydra's grammar keeps them strings; '${' is refused upstream by
the spec model so OmegaConf never interpolates); numbers and booleans are rendered from typed values.
Shell: every word is quoted. YAML/JSON: every scalar is a JSON string or number.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

_SHELL_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_DOUBLE_QUOTE_SAFE = re.compile(r'^[^$`\\"!\n]*$')


def hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        # Hydra quoted strings: a quote is escaped with a backslash, and backslashes need doubling only
        # where they precede a quote or the closing quote.
        body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
        body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
        return "'" + body + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
                raise ValueError(f"dict key {key!r} cannot be written as a Hydra override key")
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as a Hydra value")


def hydra_override(key: str, value: Any, prefix: str = "") -> str:
    """``key=value`` in Hydra's override grammar; ``prefix`` is '+' for keys verl's YAML does not declare."""
    return f"{prefix}{key}={hydra_value(value)}"


def shell_word(word: str) -> str:
    """One shell word: bare when plain, double-quoted when only single quotes need protecting, else shlex."""
    if _SHELL_PLAIN.match(word):
        return word
    if _DOUBLE_QUOTE_SAFE.match(word):
        return '"' + word + '"'
    return shlex.quote(word)


def json_scalar(value: Any) -> str:
    """A JSON scalar, which is also a valid quoted YAML scalar."""
    return json.dumps(value, ensure_ascii=False)


def yaml_string_list(items: list[str], indent: int = 0) -> str:
    pad = " " * indent
    return "".join(f"{pad}- {json_scalar(str(item))}\n" for item in items) or f"{pad}[]\n"


def yaml_string_map(mapping: dict[str, str], indent: int = 0) -> str:
    pad = " " * indent
    if not mapping:
        return f"{pad}{{}}\n"
    return "".join(f"{pad}{json_scalar(str(k))}: {json_scalar(str(v))}\n" for k, v in mapping.items())
